"""The fused CPU kernel of ETC's post-LN residual (`residual_norm.cc`).

`residual_norm(x, residual, gamma, beta)` is `LayerNorm(residual +
dropout(x))` over the last axis, the step that closes the attention and the
feed-forward sub-blocks of every layer; its gradient is one more fused pass
(`EtcResidualNormGrad`). The TensorFlow path (`stateless_dropout` and
tf_keras' `LayerNormalization`) stays the reference; see
`etc_realformer/kernels/build.py` for when the kernel is used.
"""

from typing import Optional

import tensorflow as tf

from etc_realformer.kernels import build


def residual_norm(x: tf.Tensor, residual: tf.Tensor, gamma: tf.Tensor,
                  beta: tf.Tensor, *, epsilon: float,
                  key: Optional[tf.Tensor] = None, threshold: int = 0,
                  gain: float = 1.0, save_sum: bool = True) -> tf.Tensor:
  """<T>[..., H] x, residual -> <T>[..., H] LayerNorm(residual + dropout(x)).

  Args:
    x: <T>[..., H] the sub-block's output (dropped out).
    residual: <T>[..., H] the sub-block's input (x's shape).
    gamma, beta: <float32>[H] the LayerNorm's scale and offset.
    epsilon: the LayerNorm's epsilon.
    key: <int32>[2] the folded dropout seed (`fold_seed(seed, site)`); None
      when no dropout applies.
    threshold: keep an element iff its 16-bit number >= threshold (0: no
      dropout).
    gain: multiplies the kept values (dropout's 1 / P(keep)).
    save_sum: keep residual + dropout(x) for the gradient (False for
      inference; a gradient asked for all the same reruns the op).
  """
  if threshold and key is None:
    raise ValueError("residual_norm: dropout needs a key")
  y, _, _ = build.load().etc_residual_norm(
      x=x, residual=residual, gamma=tf.cast(gamma, tf.float32),
      beta=tf.cast(beta, tf.float32),
      key=key if threshold else tf.zeros([2], tf.int32),
      threshold=threshold, gain=gain, epsilon=epsilon, save_sum=save_sum)
  return y


def _residual_norm_grad(op, dy, *unused):
  """Gradient of `EtcResidualNorm` (one fused pass)."""
  threshold, gain = op.get_attr("threshold"), op.get_attr("gain")
  x, residual, gamma, beta, key = op.inputs
  s, stats = op.outputs[1:3]
  if not op.get_attr("save_sum"):
    # Run for inference, yet differentiated: the same op again, keeping it.
    _, s, stats = build.load().etc_residual_norm(
        x, residual, gamma, beta, key, threshold=threshold, gain=gain,
        epsilon=op.get_attr("epsilon"), save_sum=True)
  # Without dropout both inputs get the same gradient: one tensor serves.
  share = threshold == 0 and gain == 1.0
  dx, d_residual, d_gamma, d_beta = build.load().etc_residual_norm_grad(
      dy=dy, sum=s, stats=stats, gamma=gamma, key=key, threshold=threshold,
      gain=gain, share=share)
  if share:
    dx = d_residual
  return [dx, d_residual, d_gamma, d_beta, None]


tf.RegisterGradient("EtcResidualNorm")(_residual_norm_grad)
