"""The fused path (`attention_kernel='fused'`) through TensorFlow's XLA on
the CPU: the host FFI handlers under jit_compile give the XLA path's
outputs and gradients, and the exported HLO carries the custom calls."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from encoder_testing import assert_same_training
from encoder_testing import copy_weights
from encoder_testing import loss_and_grads
from encoder_testing import probes
from encoder_testing import random_features
from encoder_testing import randomize_relative_bias
from encoder_testing import tiny_config
from encoder_testing import tiny_model
from encoder_testing import twin_models
from etc_realformer.attention import core
from etc_realformer.attention import dropout as dropout_lib
from etc_realformer.attention import fused
from etc_realformer.attention import layer as attention_layer
from etc_realformer.attention.pieces import BranchInputs
from etc_realformer.attention.pieces import BranchMasks
from etc_realformer.attention.pieces import PatternPair
from etc_realformer.attention.pieces import ScoreInputs
import fused_attention_testing as fat

# A sparse long branch with several blocks and global keys; D = 16 (the
# kernels' smallest head size).
CONFIG = dict(hidden_size=32, num_attention_heads=2, local_radius=4,
              num_hidden_layers=1, intermediate_size=32)


@pytest.fixture(scope="module")
def twins():
  return twin_models(tiny_config(**CONFIG), attention_kernel="fused")


def test_fused_matches_xla_path(twins):
  xla_model, fused_model = twins
  feats = {k: tf.constant(v) for k, v in random_features(
      xla_model.config, batch=2, long_len=23, global_len=5, seed=4).items()}
  probe = probes(xla_model.config, 2, 23, 5)
  want, got = (loss_and_grads(m, feats, probe, training=False,
                              jit_compile=True)
               for m in (xla_model, fused_model))
  assert_same_training(want, got)


@pytest.mark.parametrize("impl,period", [("sparse", 0), ("full", 0),
                                         ("sparse", 1)])
def test_fused_residual_attention_with_dropout_matches_xla_path(
    monkeypatch, impl, period):
  # Two layers (the second reads the first's streams) with RealFormer on
  # every pattern, the running mean, and hash dropout in training: the
  # kernels draw the XLA path's masks and carry its sums. The call's seed
  # is fixed: a traced random op's seed depends on the graph built before
  # it, which the two options make differently. With period 1, every layer
  # is recomputed in the backward pass (gradient checkpointing).
  monkeypatch.setattr(dropout_lib, "new_call_seed",
                      lambda: tf.constant([3, 7], tf.int32))
  config = tiny_config(**dict(CONFIG, num_hidden_layers=2),
                       residual_attention=True, residual_running_mean=True,
                       attention_probs_dropout_prob=0.2,
                       grad_checkpointing_period=period)
  xla_model = tiny_model(config, dropout_rng="hash")
  fused_model, feats, probe, got = _same_training(xla_model, impl, seed=6,
                                                  dropout_rng="hash")
  # Dropout really was on: an inference pass gives another loss.
  eval_loss = loss_and_grads(fused_model, feats, probe, training=False,
                             impl=impl, jit_compile=True)[1]
  assert abs(eval_loss - got[1]) > 1e-3


@pytest.mark.parametrize("impl,rng,layers,patterns", [
    ("sparse", "hash", 3, None), ("full", "hash", 2, None),
    ("sparse", "hash", 3, ("l2l", "g2l")), ("sparse", "philox", 2, None)])
def test_fused_recomputed_streams_match_xla_path(monkeypatch, impl, rng,
                                                 layers, patterns):
  # Recomputed streams (with three layers the third makes two layers'
  # sums), the running mean, dropout in training. RealFormer on every
  # pattern: the kernels make the sums from the sources, and the earlier
  # layers' queries, keys and per-id scores get their share of the
  # gradient; on one pattern per branch (the per-id scores differ between
  # the patterns): the sums are rebuilt in the graph and read; with Philox
  # dropout the branches fall back to the XLA path's recomputation.
  monkeypatch.setattr(dropout_lib, "new_call_seed",
                      lambda: tf.constant([2, 5], tf.int32))
  config = tiny_config(**dict(CONFIG, num_hidden_layers=layers),
                       residual_attention=True, residual_running_mean=True,
                       attention_probs_dropout_prob=0.2,
                       **({"residual_patterns": patterns} if patterns
                          else {}))
  xla_model = tiny_model(config, dropout_rng=rng,
                         recompute_residual_streams=True)
  _same_training(xla_model, impl, seed=8, dropout_rng=rng,
                 recompute_residual_streams=True)


def _same_training(xla_model, impl: str, seed: int, **execution):
  """A training step (loss and every gradient, under jit_compile) of
  `xla_model` (relative biases randomized) and of its fused twin, equal;
  returns (the twin, the features, the probes, the twin's step)."""
  config = xla_model.config
  randomize_relative_bias(xla_model)
  fused_model = copy_weights(xla_model, tiny_model(
      config, attention_kernel="fused", **execution))
  feats = {k: tf.constant(v) for k, v in random_features(
      config, batch=2, long_len=21, global_len=5, seed=seed).items()}
  probe = probes(config, 2, 21, 5)
  want, got = (loss_and_grads(m, feats, probe, training=True, impl=impl,
                              jit_compile=True)
               for m in (xla_model, fused_model))
  assert_same_training(want, got)
  return fused_model, feats, probe, got


def test_recomputed_streams_training_step_hlo(twins):
  # Every branch of every layer is fused (no fallback), and the backward
  # rebuilds the sums behind optimization barriers instead of keeping the
  # forward's.
  del twins
  config = tiny_config(**dict(CONFIG, num_hidden_layers=3),
                       residual_attention=True)
  model = tiny_model(config, recompute_residual_streams=True,
                     attention_kernel="fused")
  feats = {k: tf.constant(v) for k, v in random_features(
      config, batch=1, long_len=16, global_len=4).items()}

  def step(f):
    with tf.GradientTape() as tape:
      long_out, global_out = model(f, training=True,
                                   att_implementation="sparse")
      loss = tf.reduce_sum(long_out) + tf.reduce_sum(global_out)
    return tape.gradient(loss, model.trainable_variables)

  hlo = tf.function(step, jit_compile=True).experimental_get_compiler_ir(
      feats)(stage="hlo")
  targets = [line.split('custom_call_target="')[1].split('"')[0]
             for line in hlo.splitlines() if "custom_call_target=" in line]
  assert targets.count("etc_branch_forward") == 6
  assert targets.count("etc_branch_backward") == 6
  # One barrier per branch of the two layers that read sums.
  assert hlo.count(" opt-barrier(") >= 4


def test_fused_without_relative_ids(twins):
  xla_model, fused_model = twins
  feats = {k: tf.constant(v) for k, v in random_features(
      xla_model.config, batch=2, long_len=19, global_len=3, seed=5,
      with_relative_ids=False).items()}
  want, got = (tf.function(lambda f, m=m: m(f, att_implementation="sparse"),
                           jit_compile=True)(feats)
               for m in (xla_model, fused_model))
  for a, b in zip(want, got):
    assert fat.relative_error(b.numpy(), a.numpy()) < 1e-5


def test_exported_hlo_has_the_custom_call(twins):
  _, fused_model = twins
  feats = {k: tf.constant(v) for k, v in random_features(
      fused_model.config, batch=1, long_len=16, global_len=4).items()}
  fn = tf.function(lambda f: fused_model(f, att_implementation="sparse"),
                   jit_compile=True)
  hlo = fn.experimental_get_compiler_ir(feats)(stage="hlo")
  calls = [line for line in hlo.splitlines()
           if 'custom_call_target="etc_branch_forward"' in line]
  # Both branches of every layer.
  assert len(calls) == 2 * fused_model.config.num_hidden_layers
  assert all("API_VERSION_TYPED_FFI" in line for line in calls)


def test_exported_training_step_has_the_backward_calls(twins):
  xla_model, fused_model = twins
  feats = {k: tf.constant(v) for k, v in random_features(
      fused_model.config, batch=1, long_len=16, global_len=4).items()}

  def step(f, model):
    with tf.GradientTape() as tape:
      long_out, global_out = model(f, att_implementation="sparse")
      loss = tf.reduce_sum(long_out) + tf.reduce_sum(global_out)
    return tape.gradient(loss, model.trainable_variables)

  def targets(model):
    fn = tf.function(lambda f: step(f, model), jit_compile=True)
    hlo = fn.experimental_get_compiler_ir(feats)(stage="hlo")
    return [line.split('custom_call_target="')[1].split('"')[0]
            for line in hlo.splitlines() if "custom_call_target=" in line]

  layers = fused_model.config.num_hidden_layers
  calls = targets(fused_model)
  assert calls.count("etc_branch_forward") == 2 * layers
  assert calls.count("etc_branch_backward") == 2 * layers
  assert not any(c.startswith("etc_branch") for c in targets(xla_model))


def test_outside_xla_the_fused_option_changes_nothing(twins):
  xla_model, fused_model = twins
  feats = random_features(xla_model.config, batch=1, long_len=16,
                          global_len=4)
  for a, b in zip(xla_model(feats), fused_model(feats)):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_covers_only_what_the_kernels_compute(twins):
  del twins
  base = core.BranchSpec(patterns=("l2l", "l2g"), band=True, block_len=5)
  x = _pieces()
  assert fused.covers(base, x)
  assert fused.covers(
      base._replace(streams=core.StreamSpec(carried=("l2g",))), x)
  assert fused.covers(base._replace(dropout=core.ProbsDropout(
      rate=0.1, training=True, rng="hash")), x)
  assert not fused.covers(base._replace(return_probs=True), x)
  philox = base._replace(dropout=core.ProbsDropout(rate=0.1, training=True))
  assert "dropout_rng" in fused.uncovered_reason(philox, x)
  assert fused.covers(
      base._replace(dropout=core.ProbsDropout(rate=0.1, training=False)), x)
  recomputed = dataclasses.replace(x, sources=(x.scores,))
  assert fused.covers(base, recomputed)
  carried = base._replace(streams=core.StreamSpec(carried=("l2l", "l2g")))
  summed = dataclasses.replace(x, sums=PatternPair(
      tf.zeros([1, 2, 3, 5, 15]), tf.zeros([1, 2, 3, 5, 4])))
  assert fused.covers(carried, summed)
  low = dataclasses.replace(x, sums=PatternPair(
      tf.zeros([1, 2, 3, 5, 15], tf.bfloat16), None))
  assert "dtype" in fused.uncovered_reason(carried, low)
  odd_head = dataclasses.replace(x, scores=dataclasses.replace(
      x.scores, q=tf.zeros([1, 2, 3, 5, 24])))
  assert "head size" in fused.uncovered_reason(base, odd_head)


def _pieces():
  q = tf.zeros([1, 2, 3, 5, 16])
  return BranchInputs(
      scores=ScoreInputs(q, PatternPair(tf.zeros([1, 2, 5, 5, 16]),
                                        tf.zeros([1, 2, 4, 16]))),
      values=PatternPair(tf.zeros([1, 2, 5, 5, 16]), tf.zeros([1, 2, 4, 16])),
      masks=BranchMasks(PatternPair(tf.zeros([1, 1, 3, 5, 15]),
                                    tf.zeros([1, 1, 3, 5, 4])),
                        tf.ones([1, 1, 3, 5, 1])))


def test_jaxlib_runs_the_exported_custom_calls(twins, tmp_path):
  # The GPU harness's route on the CPU: the fused training step's XLA
  # module, exported from TensorFlow, compiled and run by jaxlib with the same
  # library's host handlers registered there, gives TensorFlow's value.
  from etc_realformer.kernels import ffi_library  # pylint: disable=g-import-not-at-top
  from tools.gpu import xla_export  # pylint: disable=g-import-not-at-top
  from tools.gpu import xla_runner  # pylint: disable=g-import-not-at-top
  _, fused_model = twins
  feats = {k: tf.constant(v) for k, v in random_features(
      fused_model.config, batch=1, long_len=16, global_len=4, seed=2).items()}
  probe = tf.constant(probes(fused_model.config, 1, 16, 4)[0])

  @tf.function(jit_compile=True)
  def step(f):
    # A training step's value: the forward and the backward calls.
    with tf.GradientTape() as tape:
      long_out, _ = fused_model(f, att_implementation="sparse")
      loss = tf.reduce_sum(long_out * probe)
    grads = tape.gradient(loss, fused_model.trainable_variables)
    return loss + tf.add_n([tf.reduce_sum(tf.square(g)) for g in grads
                            if g is not None])

  directory = str(tmp_path / "fused")
  xla_export.write_module(tf, step, feats, fused_model.variables,
                          {"export_dir": directory, "xla_reference": True})
  xla_runner.register_ffi_library(ffi_library.load_into_tensorflow(), "cpu")
  record = xla_runner.run(directory, repeats=1, warmup=1, platform="cpu")
  assert record["relative_difference"] < 1e-5, record


@pytest.mark.parametrize("policy,stream_dtype", [
    ("mixed_bfloat16", "compute"), ("mixed_float16", "float32")])
def test_fused_mixed_precision_close_to_xla_path(monkeypatch, policy,
                                                 stream_dtype):
  # bfloat16 / float16 inputs, RealFormer sums in float32 or in the compute
  # dtype, hash dropout in training: the kernels' products round as the
  # XLA path's, their softmax stays float32; outputs and gradients agree
  # well within the compute dtype's precision (measured: outputs 3e-4 in
  # bfloat16, 6e-5 in float16).
  import tf_keras  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(dropout_lib, "new_call_seed",
                      lambda: tf.constant([5, 9], tf.int32))
  config = tiny_config(**CONFIG, residual_attention=True,
                       attention_probs_dropout_prob=0.1)
  reference = tiny_model(config)
  randomize_relative_bias(reference)
  tf_keras.mixed_precision.set_global_policy(policy)
  try:
    models = [copy_weights(reference, tiny_model(
        config, dropout_rng="hash", stream_dtype=stream_dtype,
        attention_kernel=kernel)) for kernel in ("xla", "fused")]
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")
  feats = {k: tf.constant(v) for k, v in random_features(
      config, batch=2, long_len=21, global_len=5, seed=3).items()}
  probe = probes(config, 2, 21, 5)

  def step(model):
    with tf.GradientTape() as tape:
      outs = model(feats, training=True, att_implementation="sparse")
      loss = sum(tf.reduce_sum(tf.cast(o, tf.float32) * p)
                 for o, p in zip(outs, probe))
    grads = tape.gradient(loss, model.trainable_variables)
    return [tf.cast(o, tf.float32) for o in outs], grads

  (outs_a, grads_a), (outs_b, grads_b) = (
      tf.function(lambda m=m: step(m), jit_compile=True)() for m in models)
  tolerance = 3e-3 if policy == "mixed_bfloat16" else 5e-4
  for a, b in zip(outs_a, outs_b):
    assert np.isfinite(b.numpy()).all()
    assert fat.relative_error(b.numpy(), a.numpy()) < tolerance
  assert [a is None for a in grads_a] == [b is None for b in grads_b]
  pairs = [(tf.convert_to_tensor(a).numpy().astype(np.float64),
            tf.convert_to_tensor(b).numpy().astype(np.float64))
           for a, b in zip(grads_a, grads_b) if a is not None]
  # Each gradient against its own scale, or the largest one's where its
  # exact value is zero (a key bias: softmax ignores a shift of all its
  # logits) and both hold rounding noise.
  floor = 1e-2 * max(np.linalg.norm(a) for a, _ in pairs)
  for a, b in pairs:
    assert np.isfinite(b).all()
    error = np.linalg.norm(b - a) / max(np.linalg.norm(a), floor)
    assert error < 2 * tolerance


def test_fused_full_path_long_branch_matches_xla_path(twins):
  # On the full path the long branch's l2l is dense [L, L]: the kernels'
  # dense first pattern.
  xla_model, fused_model = twins
  feats = {k: tf.constant(v) for k, v in random_features(
      xla_model.config, batch=2, long_len=13, global_len=4, seed=7).items()}
  probe = probes(xla_model.config, 2, 13, 4)
  want, got = (loss_and_grads(m, feats, probe, training=False, impl="full",
                              jit_compile=True)
               for m in (xla_model, fused_model))
  assert_same_training(want, got)


@pytest.mark.parametrize("side", ["long", "global"])
@pytest.mark.parametrize("has_ids", [True, False])
def test_graph_codes_are_the_references(side, has_ids):
  # The codes the graph builds from the core's masks and ids are the ones
  # the kernels are tested on: NO_ID only where the band has no relative
  # term, a masked key's id kept in the low 7 bits.
  if side == "long":
    case = fat.BranchCase.long_branch(batch=2, num_heads=2, num_blocks=3,
                                      block_len=5, global_len=6, num_ids=7,
                                      has_ids=has_ids)
  else:
    case = fat.BranchCase.global_branch(batch=2, num_heads=2, global_len=6,
                                        long_len=20, num_ids=7, has_ids=has_ids)
  pieces = fat.branch_pieces(case, seed=5, masked_rows=1)
  spec, x = fat.core_branch(case, pieces)
  got = fused.attention_codes(spec, x.masks, has_ids)
  for codes, want in zip(got, (pieces["codes1"], pieces["codes2"])):
    assert codes.dtype == tf.int8
    np.testing.assert_array_equal(codes.numpy(), want)
  assert (pieces["codes2"] < 0).any() and (pieces["codes2"] >= 0).any()


@pytest.mark.parametrize("pattern_with_ids", [0, 1])
def test_relative_ids_on_one_pattern_fall_back(pattern_with_ids):
  # The codes cannot say "unmasked, no relative term": such a branch runs on
  # the XLA path (ETC's features give every pattern ids, or none).
  case = fat.BranchCase.long_branch(batch=1, num_heads=2, num_blocks=3,
                                    block_len=4, global_len=5, num_ids=6)
  spec, x = fat.core_branch(case, fat.branch_pieces(case, seed=3))
  assert fused.covers(spec, x)
  ids = [None, None]
  ids[pattern_with_ids] = x.masks.ids[pattern_with_ids]
  x = dataclasses.replace(x, masks=dataclasses.replace(
      x.masks, ids=PatternPair(*ids)))
  assert "one pattern" in fused.uncovered_reason(spec, x)
  want = core.attend_branch(spec, 0, case.num_blocks, x)
  got = attention_layer.attend_branches([spec], [x], num_chunks=0,
                                        fused=True)[0]
  np.testing.assert_array_equal(got.ctx.numpy(), want.ctx.numpy())


def test_fused_branch_gradient_when_nothing_reads_its_new_sums():
  # Nothing reads the emitted sums: TensorFlow hands the gradient zeros
  # for them, and the kernels' gradient is the context's alone.
  case = fat.BranchCase.global_branch(batch=1, num_heads=2, global_len=6,
                                      long_len=20, carried=(True, True))
  spec, x = fat.core_branch(case, fat.branch_pieces(case, seed=4))
  q = x.scores.q

  def loss_grad(attend):
    with tf.GradientTape() as tape:
      tape.watch(q)
      out = attend(spec, x)
      loss = tf.reduce_sum(out.ctx * out.ctx)
    return tape.gradient(loss, q)

  want = loss_grad(lambda s, y: core.attend_branch(s, 0, case.rows, y))
  got = tf.function(lambda: loss_grad(fused.fused_branch),
                    jit_compile=True)()
  assert fat.relative_error(got.numpy(), want.numpy()) < 1e-5
