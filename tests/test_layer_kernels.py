"""The fused CPU kernels of the layer's dense side (`residual_norm.cc`,
`bias_gelu.cc`) compute what the TensorFlow path computes: the post-LN
residual `LayerNorm(residual + dropout(x))` with the same dropout mask, and
`gelu(x + bias)`, with their gradients, in float32, bfloat16 and float16;
and they appear in an encoder's graph only where the kernels may run.
(Whole encoders with the kernels on against off:
tests/test_side_softmax_kernel.py, which switches all kernels together.)"""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from encoder_testing import random_features, tiny_config
from etc_realformer import EtcModel
from etc_realformer.kernels import build
from etc_realformer.kernels.bias_gelu import bias_gelu
from etc_realformer.kernels.residual_norm import residual_norm
from etc_realformer.layers.dropout import (fold_seed, keep_gain,
                                           keep_threshold, stateless_dropout)

RATE = 0.3
SEED = tf.constant([5, 9], tf.int32)
SITE = 6
# Float32 agreement; the 16-bit dtypes to about one unit of their rounding
# at the values' scale (the kernels round once where the TF ops may round
# after each step).
TOLERANCE = {tf.float32: 2e-5, tf.bfloat16: 2e-2, tf.float16: 4e-3}


def _policy(dtype):
  return "float32" if dtype == tf.float32 else f"mixed_{dtype.name}"


def _layer_norm(rng, width, dtype, rank=2):
  norm = tf_keras.layers.LayerNormalization(
      epsilon=1e-12, dtype=tf_keras.mixed_precision.Policy(_policy(dtype)))
  norm.build([None] * (rank - 1) + [width])
  norm.gamma.assign(rng.normal(size=[width]).astype(np.float32))
  norm.beta.assign(rng.normal(size=[width]).astype(np.float32))
  return norm


def _tensor(rng, shape, dtype, scale=1.0):
  return tf.cast(rng.normal(scale=scale, size=shape).astype(np.float32),
                 dtype)


def _residual_norm_pair(x, residual, norm, training, save_sum=True):
  """(TF path, kernel) outputs and gradients w.r.t. x, residual, gamma,
  beta of a weighted sum of the outputs."""
  rng = np.random.default_rng(1)
  weights = _tensor(rng, x.shape, tf.float32)
  variables = [x, residual, norm.gamma, norm.beta]
  outs, grads = [], []
  for use_kernel in (False, True):
    with tf.GradientTape() as tape:
      tape.watch([x, residual])
      if use_kernel:
        y = residual_norm(
            x, residual, norm.gamma, norm.beta, epsilon=norm.epsilon,
            key=fold_seed(SEED, SITE) if training else None,
            threshold=keep_threshold(RATE) if training else 0,
            gain=keep_gain(RATE, training), save_sum=save_sum)
      else:
        y = norm(residual + stateless_dropout(x, RATE, SEED, SITE, training))
      loss = tf.reduce_sum(tf.cast(y, tf.float32) * weights)
    outs.append(tf.cast(y, tf.float32).numpy())
    grads.append([tf.cast(g, tf.float32).numpy()
                  for g in tape.gradient(loss, variables)])
  return outs, grads


def _assert_close(ref, got, tolerance):
  scale = max(1.0, float(np.abs(ref).max()))
  np.testing.assert_allclose(got, ref, atol=tolerance * scale, rtol=tolerance)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float16],
                         ids=lambda d: d.name)
def test_residual_norm_equals_tensorflow_path(dtype, training):
  rng = np.random.default_rng(0)
  x = _tensor(rng, [37, 48], dtype)
  residual = _tensor(rng, [37, 48], dtype, scale=3.0)
  norm = _layer_norm(rng, 48, dtype)
  (ref, got), (g_ref, g_got) = _residual_norm_pair(x, residual, norm,
                                                   training)
  assert got.dtype == np.float32 and np.isfinite(got).all()
  _assert_close(ref, got, TOLERANCE[dtype])
  for a, b in zip(g_ref, g_got):
    assert np.isfinite(b).all()
    _assert_close(a, b, TOLERANCE[dtype])


def test_residual_norm_draws_the_tensorflow_dropout_mask():
  """Where the TF path dropped x, the kernel did: with a zero residual and
  identity LayerNorm weights the gradient w.r.t. x is zero exactly there."""
  rng = np.random.default_rng(2)
  x = _tensor(rng, [64, 40], tf.float32)
  residual = _tensor(rng, [64, 40], tf.float32)
  norm = _layer_norm(rng, 40, tf.float32)
  _, (g_ref, g_got) = _residual_norm_pair(x, residual, norm, True)
  dropped_ref, dropped_got = g_ref[0] == 0, g_got[0] == 0
  assert 0.2 < dropped_ref.mean() < 0.4
  np.testing.assert_array_equal(dropped_got, dropped_ref)


def test_residual_norm_gradient_of_an_inference_call():
  """save_sum=False (inference) keeps nothing; a gradient asked for all the
  same reruns the op."""
  rng = np.random.default_rng(3)
  x = _tensor(rng, [9, 16], tf.float32)
  residual = _tensor(rng, [9, 16], tf.float32)
  norm = _layer_norm(rng, 16, tf.float32)
  (ref, got), (g_ref, g_got) = _residual_norm_pair(x, residual, norm, False,
                                                   save_sum=False)
  _assert_close(ref, got, 2e-5)
  for a, b in zip(g_ref, g_got):
    _assert_close(a, b, 2e-5)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float16],
                         ids=lambda d: d.name)
def test_residual_norm_of_constant_rows_is_finite(dtype):
  """A row with zero variance (rows of zeros included) normalizes to beta,
  as the TF path does, with no NaN. Its input gradient is scaled by
  1 / sqrt(epsilon) = 1e6: in float16 that overflows to inf in the TF path
  too (what the loss scaler of mixed_float16 exists to catch), never NaN."""
  rng = np.random.default_rng(4)
  x = tf.zeros([4, 32], dtype)
  residual = tf.cast(tf.constant([[0.0] * 32, [1.5] * 32, [-3.0] * 32,
                                  [1e4] * 32]), dtype)
  norm = _layer_norm(rng, 32, dtype)
  (ref, got), (g_ref, g_got) = _residual_norm_pair(x, residual, norm, False)
  assert np.isfinite(got).all()
  _assert_close(ref, got, TOLERANCE[dtype])
  for a, b in zip(g_ref, g_got):
    assert not np.isnan(b).any()
    if dtype == tf.float16:
      np.testing.assert_array_equal(np.isinf(b), np.isinf(a))
    else:
      assert np.isfinite(b).all()


def test_residual_norm_is_deterministic():
  """gamma's and beta's gradients are summed per fixed group of rows: two
  runs agree bit for bit."""
  rng = np.random.default_rng(5)
  x = _tensor(rng, [300, 64], tf.float32)
  residual = _tensor(rng, [300, 64], tf.float32)
  norm = _layer_norm(rng, 64, tf.float32)
  first = _residual_norm_pair(x, residual, norm, True)
  second = _residual_norm_pair(x, residual, norm, True)
  np.testing.assert_array_equal(first[0][1], second[0][1])
  for a, b in zip(first[1][1], second[1][1]):
    np.testing.assert_array_equal(a, b)


def test_residual_norm_rejects_mismatched_shapes():
  norm = _layer_norm(np.random.default_rng(6), 8, tf.float32)
  with pytest.raises(tf.errors.InvalidArgumentError, match="residual"):
    residual_norm(tf.zeros([3, 8]), tf.zeros([4, 8]), norm.gamma, norm.beta,
                  epsilon=1e-12)
  with pytest.raises(tf.errors.InvalidArgumentError, match="gamma"):
    residual_norm(tf.zeros([3, 8]), tf.zeros([3, 8]), tf.ones([7]),
                  norm.beta, epsilon=1e-12)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float16],
                         ids=lambda d: d.name)
def test_bias_gelu_equals_tensorflow_path(dtype):
  rng = np.random.default_rng(7)
  # Rows of a width that is not a multiple of the vector length.
  x = _tensor(rng, [21, 75], dtype, scale=2.0)
  bias = tf.Variable(rng.normal(size=[75]).astype(np.float32))
  weights = _tensor(rng, [21, 75], tf.float32)
  outs, grads = [], []
  for use_kernel in (False, True):
    with tf.GradientTape() as tape:
      tape.watch(x)
      b = tf.cast(bias, dtype)
      y = (bias_gelu(x, b) if use_kernel else
           tf.nn.gelu(x + b, approximate=True))
      loss = tf.reduce_sum(tf.cast(y, tf.float32) * weights)
    outs.append(tf.cast(y, tf.float32).numpy())
    grads.append([tf.cast(g, tf.float32).numpy()
                  for g in tape.gradient(loss, [x, bias])])
  assert np.isfinite(outs[1]).all()
  _assert_close(outs[0], outs[1], TOLERANCE[dtype])
  for a, b in zip(*grads):
    assert np.isfinite(b).all()
    _assert_close(a, b, TOLERANCE[dtype] * (4 if dtype != tf.float32 else 1))


def test_bias_gelu_saturates_without_nan():
  x = tf.constant([[-1e4, -30.0, 0.0, 30.0, 1e4, 3e38]])
  y = bias_gelu(x, tf.zeros([6]))
  np.testing.assert_allclose(
      y.numpy(), tf.nn.gelu(x, approximate=True).numpy(), rtol=1e-6)


def _op_types(model, feats):
  fn = tf.function(lambda f: model(f, training=True,
                                   att_implementation="sparse"))
  graph = fn.get_concrete_function(feats).graph.as_graph_def()
  types = {n.op for n in graph.node}
  for f in graph.library.function:
    types |= {n.op for n in f.node_def}
  return types


def test_encoder_uses_the_layer_kernels_only_where_allowed():
  config = tiny_config(hidden_dropout_prob=0.1)
  feats = random_features(config, batch=1, long_len=9, global_len=3)
  types = _op_types(EtcModel(config), feats)
  assert {"EtcResidualNorm", "EtcBiasGelu"} <= types
  with build.disabled():
    assert not types & _op_types(EtcModel(config), feats) & set(
        build.OP_TYPES)
  # Pre-LN closes its sub-blocks differently: the TF path.
  pre_ln = _op_types(EtcModel(config.replace(use_pre_activation_order=True)),
                     feats)
  assert "EtcResidualNorm" not in pre_ln and "EtcBiasGelu" not in pre_ln
  relu = _op_types(EtcModel(config.replace(hidden_act="relu")), feats)
  assert "EtcBiasGelu" not in relu and "EtcResidualNorm" in relu


def test_a_failed_build_names_the_sources_and_leaves_no_library(
    monkeypatch, tmp_path):
  """The sources compile side by side; a compiler failure is reported per
  source and leaves nothing in the cache that a later process could load."""
  monkeypatch.setenv("CXX", "false")  # a "compiler" that always fails
  monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
  with pytest.raises(build.KernelUnavailable,
                     match="(?s)side_softmax.cc.*residual_norm.cc.*"
                     "bias_gelu.cc"):
    build.build_library()
  assert not list(tmp_path.glob("*.so")) and not list(tmp_path.glob("*.o"))


def test_kernels_take_any_leading_layout():
  """[B, N, width] in, the same layout out (the layer passes its
  activations as they are: a reshape's gradient would keep its input alive
  for its shape when the shape is dynamic)."""
  rng = np.random.default_rng(8)
  x = _tensor(rng, [2, 7, 16], tf.float32)
  residual = _tensor(rng, [2, 7, 16], tf.float32)
  norm = _layer_norm(rng, 16, tf.float32, rank=3)
  (ref, got), (g_ref, g_got) = _residual_norm_pair(x, residual, norm, True)
  assert got.shape == (2, 7, 16)
  _assert_close(ref, got, 2e-5)
  for a, b in zip(g_ref, g_got):
    _assert_close(a, b, 2e-5)
  bias = tf.constant(rng.normal(size=[16]).astype(np.float32))
  y = bias_gelu(x, bias)
  assert y.shape == (2, 7, 16)
  _assert_close(tf.nn.gelu(x + bias, approximate=True).numpy(), y.numpy(),
                2e-5)
