"""Weight initializers (`etc_realformer/layers/initializers.py`): a fresh
instance per weight, and one orthogonal matrix shared by several kernels."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from etc_realformer.layers import initializers


def test_fresh_initializer_draws_new_values_with_the_same_config():
  init = tf_keras.initializers.TruncatedNormal(stddev=0.02)
  a, b = initializers.fresh_initializer(init), initializers.fresh_initializer(
      init)
  assert a is not init and b is not a
  assert a.get_config() == init.get_config()
  first, second = a([64, 64]).numpy(), b([64, 64]).numpy()
  assert not np.allclose(first, second)


def test_fresh_truncated_normal_statistics():
  # The original's initializer: N(0, 0.02) truncated at two standard
  # deviations, whose standard deviation is 0.88 x 0.02.
  values = initializers.fresh_initializer(
      tf_keras.initializers.TruncatedNormal(stddev=0.02))([256, 256]).numpy()
  assert np.abs(values).max() <= 0.04
  assert abs(values.mean()) < 0.02 * 0.01
  assert values.std() == pytest.approx(0.02 * 0.8796, rel=0.02)


def test_fresh_initializer_by_name_and_plain_callables():
  init = initializers.fresh_initializer("zeros")
  assert isinstance(init, tf_keras.initializers.Zeros)

  def plain(shape, dtype=None):
    return tf.ones(shape, dtype)

  assert initializers.fresh_initializer(plain) is plain


def test_shared_orthogonal_matrix_and_its_transpose():
  shared = initializers.SharedOrthogonal()
  q = shared.initializer()([8, 8]).numpy()
  np.testing.assert_allclose(q.T @ q, np.eye(8), atol=1e-5)
  # Every kernel gets the same Q, scaled; the transposed one gain * Q^T.
  np.testing.assert_allclose(shared.initializer(2.0)([8, 8]), 2.0 * q,
                             rtol=1e-6)
  np.testing.assert_allclose(shared.transposed_initializer(0.5)([8, 8]),
                             0.5 * q.T, rtol=1e-6)
  # A value kernel Q then an output kernel g Q^T start as g times identity.
  np.testing.assert_allclose(
      q @ shared.transposed_initializer(0.5)([8, 8]).numpy(),
      0.5 * np.eye(8), atol=1e-5)
  # Another instance draws another matrix.
  other = initializers.SharedOrthogonal().initializer()([8, 8]).numpy()
  assert not np.allclose(other, q)


def test_shared_orthogonal_dtype_and_keras_arguments():
  shared = initializers.SharedOrthogonal()
  init = shared.initializer(1.0)
  out = init([4, 4], dtype=tf.bfloat16, partition_info=None)
  assert out.dtype == tf.bfloat16
  assert init([4, 4]).dtype == tf.float32
  # As a Keras weight initializer.
  layer = tf_keras.layers.Dense(4, kernel_initializer=init, use_bias=False)
  layer.build([None, 4])
  np.testing.assert_array_equal(layer.kernel.numpy(), init([4, 4]).numpy())


@pytest.mark.parametrize("shape", [[4, 8], [4], [2, 2, 2]])
def test_shared_orthogonal_needs_square_kernels(shape):
  with pytest.raises(ValueError, match=r"identity init needs square "
                     r"kernels, got \[" + ", ".join(map(str, shape))):
    initializers.SharedOrthogonal().initializer()(shape)
