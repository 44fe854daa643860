"""Dense projections with the released checkpoints' weight names
(`etc_realformer/layers/projections.py`), against NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.layers import projections


def _built(layer, in_dim, seed=0):
  """Builds `layer` and gives it a random bias (zeros would hide it)."""
  layer.build(tf.TensorShape([None, in_dim]))
  rng = np.random.RandomState(seed)
  layer.bias.assign(rng.normal(size=layer.bias.shape).astype(np.float32))
  return layer, layer.kernel.numpy(), layer.bias.numpy()


@pytest.mark.parametrize("shape", [[3, 5], [2, 4, 5], [2, 3, 4, 5]])
def test_linear_matches_numpy_at_any_rank(shape):
  layer, kernel, bias = _built(projections.Linear(6, "glorot_uniform"), 5)
  assert kernel.shape == (5, 6) and bias.shape == (6,)
  x = np.random.RandomState(1).normal(size=shape).astype(np.float32)
  y = layer(tf.constant(x)).numpy()
  expected = x @ kernel + bias
  assert y.shape == (*shape[:-1], 6)
  np.testing.assert_allclose(y, expected, rtol=1e-5,
                             atol=1e-6 * np.abs(expected).max())


def test_linear_casts_to_the_compute_dtype():
  layer, kernel, bias = _built(
      projections.Linear(4, "glorot_uniform", dtype="mixed_bfloat16"), 3)
  assert layer.kernel.dtype == tf.float32
  x = np.random.RandomState(1).normal(size=[2, 7, 3]).astype(np.float32)
  y = layer(tf.constant(x))  # float32 input, bfloat16 compute
  assert y.dtype == tf.bfloat16
  expected = x @ kernel + bias
  # bfloat16 keeps 8 bits of mantissa.
  np.testing.assert_allclose(y.numpy().astype(np.float32), expected,
                             atol=0.02 * np.abs(expected).max())


def test_linear_official_names_and_initializer():
  layer = projections.Linear(3, "zeros")
  layer.build(tf.TensorShape([None, 2]))
  assert set(layer.official_variables()) == {"kernel", "bias"}
  assert layer.official_variables()["kernel"] is layer.kernel
  assert np.all(layer.kernel.numpy() == 0.0)


def test_head_projection_splits_heads_in_front_of_the_sequence():
  heads, size = 3, 2
  layer, kernel, bias = _built(
      projections.HeadProjection(heads, size, "glorot_uniform"), 5)
  x = np.random.RandomState(1).normal(size=[2, 4, 5]).astype(np.float32)
  y = layer(tf.constant(x)).numpy()
  assert y.shape == (2, heads, 4, size)
  flat = x @ kernel + bias  # [B, N, H*D], head h at columns h*D .. h*D+D-1
  expected = flat.reshape(2, 4, heads, size).transpose(0, 2, 1, 3)
  np.testing.assert_allclose(y, expected, rtol=1e-5,
                             atol=1e-6 * np.abs(expected).max())
  # The original wraps the Dense in a `linear` scope.
  assert sorted(layer.official_variables()) == ["linear/bias",
                                                "linear/kernel"]
  # merge_heads undoes the layout.
  np.testing.assert_allclose(projections.merge_heads(tf.constant(y)), flat,
                             rtol=1e-5, atol=1e-6 * np.abs(flat).max())


def test_merge_heads_is_a_pure_layout_change():
  x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
  out = projections.merge_heads(tf.constant(x)).numpy()
  assert out.shape == (2, 4, 15)
  np.testing.assert_array_equal(out[1, 2, 5:10], x[1, 1, 2])
