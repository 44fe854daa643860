"""The feed-forward block (`etc_realformer/layers/feed_forward.py`) against
NumPy, and its checkpoint names."""

import numpy as np
import tensorflow as tf

from etc_realformer.layers.feed_forward import FeedForward


def _gelu_tanh(x):
  """BERT's tanh approximation of gelu."""
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) *
                                  (x + 0.044715 * x ** 3)))


def _randomize_biases(layer, rng):
  for dense in (layer.layer_0, layer.layer_1):
    dense.bias.assign(rng.normal(size=dense.bias.shape).astype(np.float32))


def test_matches_numpy_and_weights_exist_after_build():
  layer = FeedForward(4, 10, "gelu", "glorot_uniform")
  layer.build()
  assert layer.layer_0.kernel.shape == (4, 10)
  assert layer.layer_1.kernel.shape == (10, 4)
  rng = np.random.RandomState(0)
  _randomize_biases(layer, rng)
  x = rng.normal(size=[2, 3, 4]).astype(np.float32)
  w0, b0 = layer.layer_0.kernel.numpy(), layer.layer_0.bias.numpy()
  w1, b1 = layer.layer_1.kernel.numpy(), layer.layer_1.bias.numpy()
  expected = _gelu_tanh(x @ w0 + b0) @ w1 + b1
  y = layer(tf.constant(x)).numpy()
  assert y.shape == (2, 3, 4)
  np.testing.assert_allclose(y, expected, rtol=1e-5,
                             atol=1e-5 * np.abs(expected).max())


def test_activation_by_name():
  layer = FeedForward(3, 5, "relu", "glorot_uniform")
  layer.build()
  rng = np.random.RandomState(1)
  _randomize_biases(layer, rng)
  x = rng.normal(size=[4, 3]).astype(np.float32)
  hidden = np.maximum(x @ layer.layer_0.kernel.numpy() +
                      layer.layer_0.bias.numpy(), 0.0)
  expected = hidden @ layer.layer_1.kernel.numpy() + layer.layer_1.bias.numpy()
  np.testing.assert_allclose(layer(tf.constant(x)).numpy(), expected,
                             rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_official_names():
  layer = FeedForward(3, 5, "gelu", "glorot_uniform")
  layer.build()
  names = layer.official_variables()
  assert sorted(names) == [
      "dense_layers/layer_0/bias", "dense_layers/layer_0/kernel",
      "dense_layers/layer_1/bias", "dense_layers/layer_1/kernel"]
  assert names["dense_layers/layer_1/kernel"] is layer.layer_1.kernel
  # Each kernel gets its own draw from the one initializer.
  assert not np.allclose(layer.layer_0.kernel.numpy()[:3, :3],
                         layer.layer_1.kernel.numpy()[:3, :3])
