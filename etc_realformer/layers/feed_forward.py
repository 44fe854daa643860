"""The position-wise feed-forward block of an ETC layer."""

from typing import Dict

import tensorflow as tf
import tf_keras

from etc_realformer.layers.activations import get_activation
from etc_realformer.layers.projections import Linear


class FeedForward(tf_keras.layers.Layer):
  """Dense(intermediate, act) -> Dense(hidden): <T>[..., hidden] -> same.

  Checkpoint names: `dense_layers/layer_0/{kernel,bias}`,
  `dense_layers/layer_1/{kernel,bias}`.
  """

  def __init__(self, hidden_size: int, intermediate_size: int,
               activation: str, initializer, **kwargs):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.activation = get_activation(activation)
    self.layer_0 = Linear(intermediate_size, initializer, name="layer_0")
    self.layer_1 = Linear(hidden_size, initializer, name="layer_1")

  def build(self, input_shape=None):
    self.layer_0.build(tf.TensorShape([None, self.hidden_size]))
    self.layer_1.build(tf.TensorShape([None, self.layer_0.units]))
    super().build(input_shape)

  def call(self, x: tf.Tensor) -> tf.Tensor:
    return self.layer_1(self.activation(self.layer_0(x)))

  def official_variables(self) -> Dict[str, tf.Variable]:
    out = {}
    for layer in (self.layer_0, self.layer_1):
      for suffix, var in layer.official_variables().items():
        out[f"dense_layers/{layer.name}/{suffix}"] = var
    return out
