"""The LayerNorm of every sub-block (`etc_realformer/layers/normalization.py`)
against NumPy, in float32 and under the mixed policies."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from etc_realformer.layers import normalization


def _layer_norm(x, gamma, beta, epsilon=normalization.EPSILON):
  x = x.astype(np.float64)
  mean = x.mean(-1, keepdims=True)
  var = x.var(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


def test_matches_numpy_with_the_originals_epsilon():
  layer = normalization.layer_norm("layer_norm_0")
  assert layer.name == "layer_norm_0" and layer.epsilon == 1e-12
  layer.build([None, None, 6])
  rng = np.random.RandomState(0)
  layer.gamma.assign(rng.normal(size=6).astype(np.float32))
  layer.beta.assign(rng.normal(size=6).astype(np.float32))
  x = rng.normal(loc=3.0, scale=5.0, size=[2, 4, 6]).astype(np.float32)
  expected = _layer_norm(x, layer.gamma.numpy(), layer.beta.numpy())
  np.testing.assert_allclose(layer(tf.constant(x)).numpy(), expected,
                             rtol=1e-5, atol=1e-5 * np.abs(expected).max())
  assert [v.name.split("/")[-1] for v in layer.weights] == ["gamma:0",
                                                            "beta:0"]


# Rows of steps of the compute dtype's spacing at 0.25 (exact inputs):
# normalized in the compute dtype, the output would be off by ~0.3 in
# float16 (the variance, ~3e-7, is subnormal) and ~0.25 in bfloat16 (the
# mean rounds to 8 bits); in float32 only the output's rounding remains.
@pytest.mark.parametrize("policy,compute,step", [
    ("mixed_float16", tf.float16, 2.0 ** -12),
    ("mixed_bfloat16", tf.bfloat16, 2.0 ** -9)])
def test_normalizes_in_float32_under_mixed_policies(policy, compute, step):
  tf_keras.mixed_precision.set_global_policy(policy)
  try:
    layer = normalization.layer_norm("ln")
    layer.build([None, 8])
    assert layer.gamma.dtype == tf.float32
    x = 0.25 + np.arange(8, dtype=np.float32)[None] * step
    y = layer(tf.constant(x, compute))
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")
  assert y.dtype == compute
  y = y.numpy().astype(np.float32)
  expected = _layer_norm(x, 1.0, 0.0)
  np.testing.assert_allclose(y, expected, atol=0.01 * np.abs(expected).max())
