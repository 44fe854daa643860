"""The feed-forward activations of the original ETC, by config name.

'gelu' is BERT's tanh approximation, computed by `gelu`, which keeps only
its input for the backward pass. It is the project's one gelu.
"""

from typing import Callable

import tensorflow as tf

_GELU_C = 0.7978845608028654  # sqrt(2 / pi)
_GELU_A = 0.044715


def _gelu_derivative(x: tf.Tensor) -> tf.Tensor:
  xf = tf.cast(x, tf.float32)
  t = tf.tanh(_GELU_C * (xf + _GELU_A * xf * xf * xf))
  return 0.5 * (1.0 + t) + 0.5 * xf * (1.0 - t * t) * _GELU_C * (
      1.0 + 3.0 * _GELU_A * xf * xf)


# Fused by XLA into one pass over [N, intermediate]: unfused, the derivative's
# dozen element-wise ops leave up to three more [N, intermediate] temporaries
# alive at once, at the point of the backward pass where memory peaks.
@tf.function(jit_compile=True, autograph=False)
def _gelu_backward(x: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
  return tf.cast(_gelu_derivative(x), dy.dtype) * dy


@tf.custom_gradient
def gelu(x: tf.Tensor) -> tf.Tensor:
  """`tf.nn.gelu(x, approximate=True)` that keeps only `x` for its gradient.

  The plain op leaves four more [N, intermediate] tensors (x^3, the tanh
  argument, the tanh, ...) alive until the backward pass, 0.4 GB per layer
  at L = 8192 in float32; here the backward pass recomputes the tanh from x.
  Same forward values (the same op); the gradient is the analytic one.
  """
  y = tf.nn.gelu(x, approximate=True)

  def grad(dy):
    return _gelu_backward(x, dy)

  return y, grad


ACTIVATIONS = ("gelu", "gelu_exact", "relu", "tanh", "linear")


def get_activation(name: str) -> Callable[[tf.Tensor], tf.Tensor]:
  """The activation of config name `name` (one of ACTIVATIONS)."""
  if name == "gelu":
    return gelu
  if name == "gelu_exact":
    return lambda x: tf.nn.gelu(x, approximate=False)
  if name == "relu":
    return tf.nn.relu
  if name == "tanh":
    return tf.tanh
  if name == "linear":
    return tf.identity
  raise ValueError(f"unsupported hidden_act {name!r}; choose from "
                   f"{ACTIVATIONS}")
