"""The fused CPU kernel of the feed-forward's bias + gelu (`bias_gelu.cc`).

`bias_gelu(x, bias)` is `tf.nn.gelu(x + bias, approximate=True)` in one pass;
its gradient (`EtcBiasGeluGrad`) is one more, which also sums the bias's
gradient. The TensorFlow path stays the reference; see
`etc_realformer/kernels/build.py` for when the kernel is used.
"""

import tensorflow as tf

from etc_realformer.kernels import build


def bias_gelu(x: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
  """<T>[..., F] x, <T>[F] bias -> <T>[..., F] gelu(x + bias) (tanh form)."""
  return build.load().etc_bias_gelu(x=x, bias=tf.cast(bias, x.dtype))


def _bias_gelu_grad(op, dy):
  """Gradient of `EtcBiasGelu`: the pre-activation's and the bias's."""
  x, bias = op.inputs
  dx, d_bias = build.load().etc_bias_gelu_grad(dy=dy, x=x, bias=bias)
  return [dx, tf.cast(d_bias, bias.dtype)]


tf.RegisterGradient("EtcBiasGelu")(_bias_gelu_grad)
