"""The LayerNorm of every ETC sub-block."""

import tf_keras

# As the original (tf_slim's layer_norm).
EPSILON = 1e-12


def layer_norm(name: str) -> tf_keras.layers.LayerNormalization:
  """A LayerNorm over the last axis with weights `gamma`, `beta`.

  tf_keras normalizes in float32 under the mixed policies, so the tiny
  epsilon does not underflow in float16.
  """
  return tf_keras.layers.LayerNormalization(axis=-1, epsilon=EPSILON,
                                            name=name)
