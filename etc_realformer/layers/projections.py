"""Dense projections with the released checkpoints' weight names."""

from typing import Dict

from official.modeling import tf_utils
import tensorflow as tf
import tf_keras

from etc_realformer.layers.initializers import fresh_initializer


class Linear(tf_keras.layers.Layer):
  """y = x W + b over the last axis: <T>[..., in_dim] -> <T>[..., units].

  Written by hand rather than using `Dense` so that the weight shapes exist
  right after `build` and map one-to-one onto the released checkpoints'
  `kernel`/`bias` names.
  """

  def __init__(self, units: int, initializer, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.initializer = initializer

  def build(self, input_shape):
    in_dim = int(input_shape[-1])
    self.kernel = self.add_weight("kernel", [in_dim, self.units],
                                  initializer=fresh_initializer(
                                      self.initializer))
    self.bias = self.add_weight("bias", [self.units], initializer="zeros")
    super().build(input_shape)

  def call(self, x: tf.Tensor) -> tf.Tensor:
    x = tf.cast(x, self.compute_dtype)
    if x.shape.rank == 2:
      return tf.matmul(x, self.kernel) + self.bias
    # A 2-D matmul, not einsum("...i,io->...o"): the einsum gradient with
    # respect to the kernel materializes an [in, out, ..., N] tensor on the
    # oneDNN CPU kernels (9.7 GB at L=4096, hidden 768).
    # Static dimensions where known (`get_shape_list`): constant shapes,
    # fewer ops to trace and compile.
    dims = tf_utils.get_shape_list(x)
    y = tf.matmul(tf.reshape(x, [-1, dims[-1]]), self.kernel) + self.bias
    return tf.reshape(y, dims[:-1] + [self.units])

  def official_variables(self) -> Dict[str, tf.Variable]:
    return {"kernel": self.kernel, "bias": self.bias}


class HeadProjection(Linear):
  """Projects to attention heads: <T>[B, N, hidden] -> <T>[B, H, N, D].

  Heads come out in front of the sequence axis, the layout the score and
  value matrix products want.
  """

  def __init__(self, num_heads: int, size_per_head: int, initializer,
               **kwargs):
    super().__init__(num_heads * size_per_head, initializer, **kwargs)
    self.num_heads = num_heads
    self.size_per_head = size_per_head

  def call(self, x: tf.Tensor) -> tf.Tensor:
    y = super().call(x)
    batch, length, _ = tf_utils.get_shape_list(y, expected_rank=3)
    y = tf.reshape(y, [batch, length, self.num_heads, self.size_per_head])
    return tf.transpose(y, [0, 2, 1, 3])

  def official_variables(self) -> Dict[str, tf.Variable]:
    # The original wraps the Dense in a `linear` scope.
    return {"linear/kernel": self.kernel, "linear/bias": self.bias}


def merge_heads(x: tf.Tensor) -> tf.Tensor:
  """<T>[B, H, N, D] -> <T>[B, N, H*D] (inverse of `HeadProjection`'s
  layout)."""
  x = tf.transpose(x, [0, 2, 1, 3])
  batch, length, heads, size = tf_utils.get_shape_list(x, expected_rank=4)
  return tf.reshape(x, [batch, length, heads * size])
