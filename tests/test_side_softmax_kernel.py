"""The fused CPU kernel (`etc_realformer/kernels/`) computes what the
TensorFlow path computes: same probabilities, streams, dropout masks and
gradients, on each query side alone and in whole encoders, and it stays out
of the graphs where it must not be (XLA, export, "off")."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from encoder_testing import random_features, tiny_config
from etc_realformer import EtcModel
from etc_realformer.export import saved_model
from etc_realformer.kernels import build
from etc_realformer.kernels.side_softmax import side_softmax
from etc_realformer.layers import blocking
from etc_realformer.layers.attention import (MASK_ADDER, fused_softmax,
                                             relative_scores, row_dropout)
from etc_realformer.layers.dropout import fold_seed, keep_gain, keep_threshold

RATE = 0.3
SEED = tf.constant([7, 11], tf.int32)
SITE = 4


def _normal(rng, shape):
  return tf.constant(rng.normal(size=shape).astype(np.float32))


def _side_inputs(long_side, dtype, streams, seed=0):
  """Random inputs of one query side, in the layer's (5-D long) layouts.

  Long side: r = 3 (blocks of 4), L = 23 (padded to 24), G = 5; global
  side: G = 6 queries over 6 global and 23 long keys. Some queries have
  every key masked.
  """
  rng = np.random.default_rng(seed)
  batch, heads, vocab = 2, 3, 7
  if long_side:
    r, long_len, global_len = 3, 23, 5
    b = r + 1
    nb = -(-long_len // b)
    shape_a = [batch, heads, nb, b, 3 * b]
    shape_b = [batch, heads, nb, b, global_len]
    raw_b_shape = [batch, heads, long_len, global_len]
    ids_a_shape = [batch, long_len, 2 * r + 1]
    ids_b_shape = [batch, long_len, global_len]
    rows = long_len
  else:
    r, long_len, global_len = 3, 23, 6
    shape_a = [batch, heads, global_len, global_len]
    shape_b = [batch, heads, global_len, long_len]
    raw_b_shape = shape_b
    ids_a_shape = [batch, global_len, global_len]
    ids_b_shape = [batch, global_len, long_len]
    rows = global_len
  masks = [(rng.random([batch, 1] + s[2:]) > 0.3).astype(np.float32)
           for s in (shape_a, shape_b)]
  for m in masks:
    m[0, 0, 1] = 0.0  # a query (long: block 1) with every key masked
  valid = np.maximum(masks[0].max(-1, keepdims=True),
                     masks[1].max(-1, keepdims=True))
  x = dict(
      r=r, long_side=long_side,
      raw_a=tf.cast(_normal(rng, shape_a), dtype),
      raw_b=tf.cast(_normal(rng, raw_b_shape), dtype),
      per_id=_normal(rng, [batch, rows, vocab, heads]),
      ids_a=tf.constant(rng.integers(0, vocab, ids_a_shape), tf.int32),
      ids_b=tf.constant(rng.integers(0, vocab, ids_b_shape), tf.int32),
      adder_a=tf.constant(MASK_ADDER * (1.0 - masks[0])),
      adder_b=tf.constant(MASK_ADDER * (1.0 - masks[1])),
      valid=tf.constant(valid),
      up=[_normal(rng, shape_a), _normal(rng, shape_b)],
      up_streams=[_normal(rng, shape_a), _normal(rng, shape_b)])
  x["stream_a"] = _normal(rng, shape_a) if "in" in streams else None
  x["stream_b"] = _normal(rng, shape_b) if "in" in streams else None
  return x


def _reference(x, emit, num_summed, training, row_start):
  """The TensorFlow path's ops (the attention layer's own helpers)."""
  r, dtype = x["r"], x["raw_a"].dtype
  a = tf.cast(x["raw_a"], tf.float32)
  b = tf.cast(x["raw_b"], tf.float32) + relative_scores(x["per_id"],
                                                        x["ids_b"])
  if x["long_side"]:
    a += blocking.window_to_blocked(relative_scores(x["per_id"], x["ids_a"]),
                                    r)
    b = blocking.split_into_blocks(b, r + 1, axis=2)
  else:
    a += relative_scores(x["per_id"], x["ids_a"])
  if x["stream_a"] is not None:
    a, b = a + x["stream_a"], b + x["stream_b"]
  new = [a, b] if emit else []
  if num_summed != 1:
    a, b = a / float(num_summed), b / float(num_summed)
  gain = keep_gain(RATE, training)
  probs = fused_softmax(a + x["adder_a"], b + x["adder_b"], x["valid"], gain)
  return [tf.cast(row_dropout(p, RATE, SEED, SITE + k, training,
                              row_start=row_start, prescaled=gain != 1.0),
                  dtype) for k, p in enumerate(probs)], new


def _kernel(x, emit, num_summed, training, row_start, save_probs=True):
  """The fused kernel on the same inputs (4-D layouts as the layer calls
  it)."""
  long_side = x["long_side"]
  b = x["r"] + 1

  def rows(t):  # [B, X, nb, b, K] -> [B, X, nb * b, K]
    if t is None or not long_side:
      return t
    s = t.shape
    return tf.reshape(t, [s[0], s[1], s[2] * s[3], s[4]])

  keys = tf.stack([fold_seed(SEED, SITE), fold_seed(SEED, SITE + 1)])
  out = side_softmax(
      rows(x["raw_a"]), x["raw_b"], rows(x["adder_a"]), rows(x["adder_b"]),
      rows(x["valid"]), band=long_side, block_len=b if long_side else 1,
      per_id=x["per_id"], ids_a=x["ids_a"], ids_b=x["ids_b"],
      stream_a=rows(x["stream_a"]), stream_b=rows(x["stream_b"]),
      emit_a=emit, emit_b=emit, num_summed=num_summed,
      keys=keys if training else None,
      threshold=keep_threshold(RATE) if training else 0,
      gain=keep_gain(RATE, training), row_start=row_start,
      save_probs=save_probs)
  shapes = [u.shape for u in x["up"]]
  probs = [tf.reshape(out.probs_a, shapes[0]),
           tf.reshape(out.probs_b, shapes[1])]
  new = ([tf.reshape(out.new_a, shapes[0]), tf.reshape(out.new_b, shapes[1])]
         if emit else [])
  return probs, new


def _run(fn, x, emit, num_summed, training, row_start):
  watched = [x["raw_a"], x["raw_b"], x["per_id"]]
  if x["stream_a"] is not None:
    watched += [x["stream_a"], x["stream_b"]]
  with tf.GradientTape() as tape:
    tape.watch(watched)
    probs, new = fn(x, emit, num_summed, training, row_start)
    loss = (sum(tf.reduce_sum(tf.cast(p, tf.float32) * u)
                for p, u in zip(probs, x["up"])) +
            sum(tf.reduce_sum(s * u) for s, u in zip(new, x["up_streams"])))
  grads = tape.gradient(loss, watched)
  return ([p.numpy().astype(np.float32) for p in probs],
          [s.numpy() for s in new],
          [tf.cast(g, tf.float32).numpy() for g in grads])


def _assert_close(ref, got, tolerance):
  (p_ref, s_ref, g_ref), (p_got, s_got, g_got) = ref, got
  for a, b in zip(p_ref, p_got):
    assert np.isfinite(b).all()
    # The same dropout mask: zero exactly where the reference is.
    np.testing.assert_array_equal(a == 0, b == 0)
    np.testing.assert_allclose(b, a, atol=tolerance, rtol=tolerance)
  assert len(s_ref) == len(s_got)
  for a, b in zip(s_ref, s_got):
    np.testing.assert_allclose(b, a, atol=1e-6, rtol=1e-6)
  for a, b in zip(g_ref, g_got):
    assert np.isfinite(b).all()
    scale = max(1.0, float(np.abs(a).max()))
    np.testing.assert_allclose(b, a, atol=tolerance * scale, rtol=tolerance)


@pytest.mark.parametrize("long_side", [True, False])
@pytest.mark.parametrize("streams,emit", [("none", False), ("none", True),
                                          ("in", True), ("in", False)])
@pytest.mark.parametrize("num_summed", [1, 3])
@pytest.mark.parametrize("training,row_start", [(False, 0), (True, 0),
                                                (True, 2)])
def test_kernel_matches_tf_ops_float32(long_side, streams, emit, num_summed,
                                       training, row_start):
  x = _side_inputs(long_side, tf.float32, streams)
  args = (x, emit, num_summed, training, row_start)
  _assert_close(_run(_reference, *args), _run(_kernel, *args), 1e-6)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
@pytest.mark.parametrize("long_side", [True, False])
def test_kernel_matches_tf_ops_16_bit(dtype, long_side):
  x = _side_inputs(long_side, dtype, "in")
  args = (x, True, 1, True, 1)
  # Probabilities and score gradients are rounded to the 16-bit dtype the
  # same way (to nearest even) on both paths; float32 sums round differently.
  _assert_close(_run(_reference, *args), _run(_kernel, *args), 1e-2)


def test_masks_equal_the_tf_mask_at_large_offsets():
  """Far into the mask the kernel still draws TF's stream: piece B's 16-bit
  numbers here straddle 2**35, where the Philox counter (8 numbers a
  block) carries into its upper 32-bit word, inside one vectorized draw."""
  x = _side_inputs(False, tf.float32, "none")
  per_row = 2 * 3 * 23  # one global query's numbers of piece B: B * H * L
  start = (1 << 35) // per_row - 2
  assert start * per_row < (1 << 35) < (start + 6) * per_row
  p_ref, _ = _reference(x, False, 1, True, start)
  p_got, _ = _kernel(x, False, 1, True, start)
  for a, b in zip(p_ref, p_got):
    np.testing.assert_array_equal(a.numpy() == 0, b.numpy() == 0)
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-6)


def test_fully_masked_rows_are_zero_and_finite_in_float16():
  x = _side_inputs(True, tf.float16, "in")
  probs, _, grads = _run(_kernel, x, True, 1, True, 0)
  for p in probs:
    assert np.isfinite(p).all()
    np.testing.assert_array_equal(p[0, :, 1], 0.0)  # block 1 of batch 0
  for g in grads:
    assert np.isfinite(g).all()


def test_relative_id_outside_the_table_is_an_error():
  x = _side_inputs(True, tf.float32, "none")
  ids = x["ids_a"].numpy()
  ids[1, 3, 2] = 7  # the table has ids 0..6
  x["ids_a"] = tf.constant(ids)
  with pytest.raises(tf.errors.InvalidArgumentError, match="ids_a.*7"):
    _kernel(x, False, 1, False, 0)


# ------------------------------------------------------------- whole models
def _twin(config):
  """The config with the kernel on and off, same weights."""
  on = EtcModel(config.replace(fused_attention_kernel="on"))
  on.build()
  rng = np.random.RandomState(3)
  for v in on.trainable_variables:
    v.assign(rng.normal(scale=0.3, size=v.shape).astype(np.float32))
  off = EtcModel(config.replace(fused_attention_kernel="off"))
  off.build()
  targets = off.official_variables()
  for name, var in on.official_variables().items():
    targets[name].assign(var)
  return on, off


def _step(model, feats, training, use_function=False):
  def step():
    tf.random.set_seed(99)  # the per-call dropout seed is drawn from here
    with tf.GradientTape() as tape:
      long_out, global_out = model(feats, training=training,
                                   att_implementation="sparse")
      loss = (tf.reduce_sum(tf.sin(tf.cast(long_out, tf.float32))) +
              tf.reduce_sum(tf.cos(tf.cast(global_out, tf.float32))))
    grads = tape.gradient(loss, model.trainable_variables)
    return long_out, global_out, grads
  if use_function:
    step = tf.function(step)
  long_out, global_out, grads = step()
  return ([tf.cast(long_out, tf.float32).numpy(),
           tf.cast(global_out, tf.float32).numpy()],
          [None if g is None else
           tf.cast(tf.convert_to_tensor(g), tf.float32).numpy()
           for g in grads])


def _assert_models_agree(a, b, tolerance=1e-5):
  (outs_a, grads_a), (outs_b, grads_b) = a, b
  for x, y in zip(outs_a, outs_b):
    assert np.isfinite(x).all()
    np.testing.assert_allclose(x, y, atol=tolerance, rtol=tolerance)
  for x, y in zip(grads_a, grads_b):
    assert (x is None) == (y is None)
    if x is None:
      continue
    atol = tolerance * max(1.0, float(np.abs(y).max()))
    np.testing.assert_allclose(x, y, atol=atol, rtol=tolerance)


MODEL_CASES = {
    "residual": dict(residual_attention=True),
    "no_residual": dict(residual_attention=False),
    "running_mean": dict(residual_attention=True, residual_running_mean=True,
                         num_hidden_layers=3),
    "l2g_stream_only": dict(residual_attention=True,
                            residual_patterns=("l2g",)),
    "g2l_stream_only": dict(residual_attention=True,
                            residual_patterns=("g2l",)),
    "chunked": dict(residual_attention=True, attention_chunk_len=4),
    "recomputed_streams": dict(residual_attention=True,
                               recompute_residual_streams=True,
                               attention_chunk_len=6),
    "recomputed_streams_one_chunk": dict(residual_attention=True,
                                         recompute_residual_streams=True),
    "recompute_attention": dict(residual_attention=True,
                                recompute_attention=True),
    "checkpointing": dict(residual_attention=True,
                          grad_checkpointing_period=1, num_hidden_layers=3),
}


@pytest.mark.parametrize("case", sorted(MODEL_CASES))
def test_encoder_with_kernel_equals_tensorflow_path(case):
  config = tiny_config(attention_probs_dropout_prob=0.2,
                       hidden_dropout_prob=0.2, **MODEL_CASES[case])
  on, off = _twin(config)
  feats = random_features(config, batch=2, long_len=13, global_len=4)
  # Inference (no dropout) and training (dropout masks from the seed).
  for training in (False, True):
    _assert_models_agree(_step(off, feats, training),
                         _step(on, feats, training))


def test_encoder_kernel_without_relative_ids_in_tf_function():
  config = tiny_config(residual_attention=True,
                       attention_probs_dropout_prob=0.2)
  on, off = _twin(config)
  feats = random_features(config, batch=2, long_len=11, global_len=3,
                          with_relative_ids=False)
  _assert_models_agree(_step(off, feats, True, use_function=True),
                       _step(on, feats, True, use_function=True))


def test_encoder_kernel_mixed_bfloat16():
  tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    config = tiny_config(residual_attention=True,
                         attention_probs_dropout_prob=0.2)
    on, off = _twin(config)
    feats = random_features(config, batch=2, long_len=13, global_len=4)
    # Same roundings on both paths; matrix products of bfloat16 inputs
    # accumulate in different orders.
    _assert_models_agree(_step(off, feats, True), _step(on, feats, True),
                         tolerance=2e-2)
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")


# ------------------------------------------------------ where it never runs
def _op_types(model, feats, jit_compile=False):
  fn = tf.function(lambda f: model(f, training=True,
                                   att_implementation="sparse"),
                   jit_compile=jit_compile)
  graph_def = fn.get_concrete_function(
      {k: tf.constant(v) for k, v in feats.items()}).graph.as_graph_def()
  types = {n.op for n in graph_def.node}
  for f in graph_def.library.function:
    types |= {n.op for n in f.node_def}
  return types


@pytest.fixture(name="tiny")
def fixture_tiny():
  config = tiny_config(residual_attention=True,
                       attention_probs_dropout_prob=0.1)
  feats = random_features(config, batch=1, long_len=9, global_len=3)
  return config, feats


def test_kernel_in_graph_by_default_on_cpu(tiny):
  config, feats = tiny
  model = EtcModel(config)
  assert "EtcSideSoftmax" in _op_types(model, feats)


def test_kernel_off_under_xla_disabled_and_off(tiny):
  config, feats = tiny
  model = EtcModel(config)
  assert "EtcSideSoftmax" not in _op_types(model, feats, jit_compile=True)
  with build.disabled():
    assert "EtcSideSoftmax" not in _op_types(model, feats)
  off = EtcModel(config.replace(fused_attention_kernel="off"))
  assert "EtcSideSoftmax" not in _op_types(off, feats)


def test_on_fails_loudly_when_the_kernel_cannot_be_built(monkeypatch):
  def broken():
    raise build.KernelUnavailable("no compiler here")
  monkeypatch.setattr(build, "load", broken)
  with pytest.raises(build.KernelUnavailable, match="no compiler"):
    build.use_fused_kernel("on")
  monkeypatch.setattr(build, "available", lambda: False)
  assert not build.use_fused_kernel("auto")


def test_config_rejects_unknown_kernel_setting():
  with pytest.raises(ValueError, match="fused_attention_kernel"):
    tiny_config(fused_attention_kernel="fast")


def _serving_function(model, feats):
  specs = {k: tf.TensorSpec([None] + list(v.shape[1:]), tf.int32)
           for k, v in feats.items()}
  return tf.function(
      lambda f: model(f, training=False, att_implementation="sparse")[0],
      input_signature=[specs])


def test_export_traces_the_tensorflow_path(tiny, tmp_path):
  config, feats = tiny
  model = EtcModel(config)
  model(feats, training=False, att_implementation="sparse")  # builds
  path = saved_model.export_saved_model(
      model, {"serving_default": _serving_function(model, feats)},
      str(tmp_path / "export"))
  types = saved_model._op_types(path)  # pylint: disable=protected-access
  assert "MatMul" in types or "BatchMatMulV2" in types
  assert not types & set(build.OP_TYPES)


def test_export_refuses_a_signature_traced_with_the_kernel(tiny, tmp_path):
  config, feats = tiny
  model = EtcModel(config)
  traced = _serving_function(model, feats).get_concrete_function()
  with pytest.raises(ValueError, match="EtcSideSoftmax"):
    saved_model.export_saved_model(model, {"serving_default": traced},
                                   str(tmp_path / "export"))
  assert not (tmp_path / "export").exists() or not any(
      p.name.isdigit() for p in (tmp_path / "export").iterdir())


def test_repeated_calls_agree_bit_for_bit():
  """Row results depend on the row alone, not on where the scratch buffers
  happen to sit (an address-dependent reduction once made two runs of one
  model differ in the last bit)."""
  x = _side_inputs(True, tf.float32, "in")
  first = _run(_kernel, x, True, 3, True, 0)
  for _ in range(3):
    again = _run(_kernel, x, True, 3, True, 0)
    for a, b in zip(sum(first, []), sum(again, [])):
      np.testing.assert_array_equal(a, b)


def test_gradient_of_a_call_that_kept_no_probabilities():
  """Inference calls keep no float32 probabilities; a gradient asked of one
  all the same recomputes them and equals the training call's."""
  x = _side_inputs(True, tf.float32, "in")
  kept = _run(_kernel, x, True, 1, True, 0)
  lean = _run(lambda *a: _kernel(*a, save_probs=False), x, True, 1, True, 0)
  for a, b in zip(sum(kept, []), sum(lean, [])):
    np.testing.assert_array_equal(a, b)
