"""Weight initializers: a fresh instance per weight, and one orthogonal
matrix shared by several kernels (the from-scratch "identity" priors)."""

import tensorflow as tf
import tf_keras


def fresh_initializer(initializer):
  """A new instance of `initializer`.

  tf_keras returns identical values from one unseeded initializer instance
  called several times, so each weight gets its own instance.
  """
  if isinstance(initializer, str):
    return tf_keras.initializers.get(initializer)
  if not isinstance(initializer, tf_keras.initializers.Initializer):
    return initializer  # A plain callable (e.g. `SharedOrthogonal`'s).
  return initializer.__class__.from_config(initializer.get_config())


class SharedOrthogonal:
  """One random orthogonal matrix Q handed to several kernels.

  `initializer(gain)` gives gain * Q, `transposed_initializer(gain)` gives
  gain * Q^T: a value kernel Q followed by an output kernel gain * Q^T starts
  as gain times the identity (`EtcConfig.value_output_identity_init`); query
  and key kernels both s * Q start with scores s^2 x.x'
  (`EtcConfig.query_key_identity_init`). Q is drawn on first use (variables
  are initialised eagerly, also when first built inside a `tf.function`).
  """

  def __init__(self):
    self._q = None

  def _matrix(self, shape) -> tf.Tensor:
    if len(shape) != 2 or shape[0] != shape[1]:
      raise ValueError(f"identity init needs square kernels, got "
                       f"{list(shape)}")
    if self._q is None:
      self._q = tf_keras.initializers.Orthogonal()(list(shape), tf.float32)
    return self._q

  def initializer(self, gain: float = 1.0):
    def init(shape, dtype=None, **unused_kwargs):
      return tf.cast(gain * self._matrix(shape), dtype or tf.float32)
    return init

  def transposed_initializer(self, gain: float = 1.0):
    def init(shape, dtype=None, **unused_kwargs):
      return tf.cast(gain * tf.transpose(self._matrix(shape)),
                     dtype or tf.float32)
    return init
