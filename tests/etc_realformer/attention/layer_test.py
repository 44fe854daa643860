"""`FusedGlobalLocalAttention` and its strategies: whole, chunked (with
recompute), recomputed, and residual streams carried as their sources, all
computing the same function, gradients and dropout masks."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from encoder_testing import (assert_same_training, copy_weights,
                             loss_and_grads,
                             max_abs_diff, model_weights, numpy_reference,
                             probes, random_features,
                             randomize_relative_bias, tiny_config, tiny_model,
                             twin_models)
from etc_realformer import ExecutionConfig
from etc_realformer.attention import dropout as dropout_lib
from etc_realformer.attention import layer as attention_layer
from etc_realformer.attention import relative_table
from etc_realformer.attention import streams as streams_lib
from etc_realformer.attention.masks import prepare_side_inputs

# (radius, long_len, global_len, chunk_len): chunks of one block and of
# several, a last chunk shorter than the others, a length that is not a
# multiple of the block, more chunks than global rows, one chunk.
CASES = [(1, 7, 4, 2), (2, 13, 4, 3), (2, 12, 5, 6), (3, 16, 3, 4),
         (2, 11, 4, 100)]


def _assert_trains_alike(config, first, second, long_len, global_len, seed,
                         probe_seed=0, first_call=None, second_call=None,
                         **call):
  """`first` and `second` give the same training step (outputs, loss and
  gradients of `loss_and_grads` with `call`, and per model `first_call` or
  `second_call` on top) on a batch of two random examples."""
  feats = random_features(config, batch=2, long_len=long_len,
                          global_len=global_len, seed=seed)
  probe = probes(config, 2, long_len, global_len, seed=probe_seed)
  assert_same_training(*(
      loss_and_grads(model, feats, probe, training=True,
                     **{**call, **(own or {})})
      for model, own in ((first, first_call), (second, second_call))))


# ---------------------------------------------------------------- the plan
def _plan(**kwargs):
  args = dict(execution=ExecutionConfig(), sparse=True, long_len=8192,
              global_len=512, training=True, return_probs=False,
              carries_streams=True, in_xla=False)
  args.update(kwargs)
  return attention_layer.plan_attention(**args)


def test_plan_chunks_long_static_sparse_inputs_only():
  assert _plan().num_chunks == 4  # "auto": chunks of 2048 above 4096
  assert _plan(long_len=4096).num_chunks == 0
  assert _plan(sparse=False).num_chunks == 0
  assert _plan(long_len=tf.constant(8192)).num_chunks == 0  # dynamic
  assert _plan(return_probs=True).num_chunks == 0
  fixed = ExecutionConfig(attention_chunk_len=3)
  assert _plan(execution=fixed, long_len=13).num_chunks == 5
  # One chunk is no chunking unless something asks for recomputation.
  assert _plan(execution=fixed, long_len=3).num_chunks == 0


def test_plan_skips_chunking_under_xla():
  # Under XLA the chunk order does not bound memory (it raised the peak), so
  # the core is computed whole there.
  assert _plan(in_xla=True).num_chunks == 0
  streams = ExecutionConfig(recompute_residual_streams=True)
  assert _plan(execution=streams, in_xla=True) == (
      attention_layer.AttentionPlan(1, True))


def test_plan_fuses_under_xla_unless_attention_is_recomputed():
  fused = ExecutionConfig(attention_kernel="fused")
  assert _plan(execution=fused, in_xla=True) == (
      attention_layer.AttentionPlan(0, False, True))
  assert not _plan(execution=fused).fused  # outside XLA
  # The kernels rebuild recomputed streams themselves; the branches they do
  # not cover keep the XLA path's recomputation (one chunk).
  streams = dataclasses.replace(fused, recompute_residual_streams=True)
  assert _plan(execution=streams, in_xla=True) == (
      attention_layer.AttentionPlan(1, True, True))
  recompute = dataclasses.replace(fused, recompute_attention=True)
  assert not _plan(execution=recompute, in_xla=True).fused
  assert _plan(execution=recompute, in_xla=True, training=False).fused


def test_plan_recomputes_when_asked():
  recompute = ExecutionConfig(recompute_attention=True)
  assert _plan(execution=recompute, long_len=100).num_chunks == 1
  assert _plan(execution=recompute, long_len=100, sparse=False
               ).num_chunks == 1
  assert _plan(execution=recompute, long_len=100, training=False
               ).num_chunks == 0
  streams = ExecutionConfig(recompute_residual_streams=True)
  assert _plan(execution=streams, long_len=100) == (
      attention_layer.AttentionPlan(1, True))
  assert _plan(execution=streams, long_len=100, carries_streams=False) == (
      attention_layer.AttentionPlan(0, False))
  # Dense path: the sums are rebuilt whole.
  assert _plan(execution=streams, long_len=100, sparse=False) == (
      attention_layer.AttentionPlan(0, True))


# ----------------------------------------------------------------- chunked
# Each shape once, the four (residual, dropout) pairs spread over them
# (both on twice): the chunk edges depend on the shape alone.
@pytest.mark.parametrize(
    "residual,dropout,radius,long_len,global_len,chunk_len",
    [(residual, dropout) + case for (residual, dropout), case in zip(
        [(False, 0.0), (True, 0.3), (True, 0.0), (False, 0.3), (True, 0.3)],
        CASES)])
def test_chunked_equals_whole(residual, dropout, radius, long_len,
                              global_len, chunk_len):
  config = tiny_config(num_hidden_layers=3, local_radius=radius,
                       residual_attention=residual,
                       attention_probs_dropout_prob=dropout,
                       hidden_dropout_prob=dropout)
  whole, chunked = twin_models(config, attention_chunk_len=chunk_len)
  # Padding, fully masked rows (random_features makes both).
  feats = random_features(config, batch=2, long_len=long_len,
                          global_len=global_len, seed=radius + long_len)
  probe = probes(config, 2, long_len, global_len)
  ref = loss_and_grads(whole, feats, probe, training=True)
  assert_same_training(ref, loss_and_grads(chunked, feats, probe,
                                           training=True))
  if dropout:  # Dropout really was on.
    eval_ref = loss_and_grads(whole, feats, probe, training=False)
    assert abs(eval_ref[1] - ref[1]) > 1e-3


def test_hash_dropout_chunked_equals_whole_and_draws_other_masks():
  # ExecutionConfig.dropout_rng='hash': chunks see the whole's bits as with
  # Philox, and the masks are not Philox's.
  config = tiny_config(num_hidden_layers=2, local_radius=2,
                       residual_attention=True,
                       attention_probs_dropout_prob=0.3,
                       hidden_dropout_prob=0.3)
  whole = tiny_model(config, dropout_rng="hash")
  randomize_relative_bias(whole)
  chunked = copy_weights(whole, tiny_model(config, dropout_rng="hash",
                                           attention_chunk_len=3))
  philox = copy_weights(whole, tiny_model(config))
  feats = random_features(config, batch=2, long_len=13, global_len=4, seed=8)
  probe = probes(config, 2, 13, 4)
  ref = loss_and_grads(whole, feats, probe, training=True)
  assert_same_training(ref, loss_and_grads(chunked, feats, probe,
                                           training=True))
  other = loss_and_grads(philox, feats, probe, training=True)
  assert abs(other[1] - ref[1]) > 1e-3


@pytest.mark.parametrize("running_mean", [False, True])
@pytest.mark.parametrize("changes", [
    dict(attention_chunk_len=3),
    dict(attention_chunk_len=3, recompute_residual_streams=True),
    dict(recompute_residual_streams=True)])
def test_strategies_match_numpy_reference_and_full(running_mean, changes):
  model = tiny_model(tiny_config(num_hidden_layers=3, residual_attention=True,
                                 residual_running_mean=running_mean),
                     **changes)
  randomize_relative_bias(model)
  feats = random_features(model.config, batch=2, long_len=14, global_len=4,
                          seed=5)
  long_out, global_out = model(feats, att_implementation="sparse")
  ref_long, ref_global = numpy_reference(model_weights(model), model.config,
                                         feats)
  assert max_abs_diff(long_out, ref_long) < 1e-5
  assert max_abs_diff(global_out, ref_global) < 1e-5
  full = model(feats, att_implementation="full")
  assert max_abs_diff(long_out, full[0]) < 1e-5
  assert max_abs_diff(global_out, full[1]) < 1e-5


# Every pattern with recomputed streams (chunked as well); plain chunks for
# a long-branch and a global-branch pattern.
@pytest.mark.parametrize("pattern,changes", [
    (pattern, dict(attention_chunk_len=4, recompute_residual_streams=True))
    for pattern in ("l2l", "l2g", "g2g", "g2l")] + [
        (pattern, dict(attention_chunk_len=3)) for pattern in ("l2l", "g2l")])
def test_each_stream_alone(pattern, changes):
  config = tiny_config(num_hidden_layers=4, residual_attention=True,
                       residual_patterns=(pattern,),
                       attention_probs_dropout_prob=0.2)
  whole, other = twin_models(config, **changes)
  _assert_trains_alike(config, whole, other, long_len=10, global_len=4,
                       seed=2)


# Chunked attention, and recomputed streams, in a graph under gradient
# checkpointing. Period 2 makes a group of two layers and then one alone,
# so streams cross group edges both ways and a layer is also checkpointed
# alone (period 1's case). (Without checkpointing, chunks and recomputed
# streams in a graph are test_xla_chunked_training_step_matches_graph's
# reference.)
@pytest.mark.slow  # traces forward and backward twice (~40 s)
def test_in_tf_function_with_checkpointing():
  long_len = 12
  config = tiny_config(num_hidden_layers=3, residual_attention=True,
                       attention_probs_dropout_prob=0.2,
                       hidden_dropout_prob=0.1)
  whole, other = twin_models(config, attention_chunk_len=5,
                             recompute_residual_streams=True,
                             grad_checkpointing_period=2)
  _assert_trains_alike(config, whole, other, long_len=long_len, global_len=4,
                       seed=4, use_function=True)


def test_chunked_without_relative_ids_and_side_inputs():
  config = tiny_config(residual_attention=True)
  whole, chunked = twin_models(config, attention_chunk_len=2)
  feats = random_features(config, batch=1, long_len=9, global_len=3, seed=8,
                          with_relative_ids=False)
  for key in ("l2g_att_mask", "g2l_att_mask"):
    del feats[key]
  probe = probes(config, 1, 9, 3)
  assert_same_training(loss_and_grads(whole, feats, probe, training=False),
                       loss_and_grads(chunked, feats, probe, training=False))


@pytest.mark.parametrize("changes", [
    dict(attention_chunk_len=2),
    # Recomputed streams are built whole for the probabilities.
    dict(attention_chunk_len=2, recompute_residual_streams=True)])
def test_probabilities_are_the_same_with_any_strategy(changes):
  config = tiny_config(num_hidden_layers=3, residual_attention=True)
  whole, other = twin_models(config, **changes)
  feats = random_features(config, batch=2, long_len=9, global_len=3, seed=1)
  _, _, probs_a = whole(feats, att_implementation="sparse",
                        return_attention_probs=True)
  _, _, probs_b = other(feats, att_implementation="sparse",
                        return_attention_probs=True)
  assert len(probs_a) == len(probs_b)
  for layer_a, layer_b in zip(probs_a, probs_b):
    assert sorted(layer_a) == sorted(layer_b)
    for pattern in layer_a:
      assert max_abs_diff(layer_a[pattern], layer_b[pattern]) < 1e-6


@pytest.mark.parametrize("long_len", [7, 13])
def test_auto_chunk_len_same_function(long_len):
  # "auto" at these lengths is one piece; the same model with small fixed
  # chunks gives the same function (the thresholds themselves are
  # ExecutionConfig's, tested in execution_test.py).
  config = tiny_config(num_hidden_layers=2, local_radius=2,
                       residual_attention=True,
                       attention_probs_dropout_prob=0.3)
  auto, fixed = twin_models(config, attention_chunk_len=3)
  _assert_trains_alike(config, auto, fixed, long_len=long_len, global_len=4,
                       seed=long_len)


# -------------------------------------------------------------- recomputed
# Under XLA the sparse path only: the barrier is the same on both paths,
# and each XLA case compiles two models (~20 s).
@pytest.mark.parametrize("impl,jit_compile", [
    ("full", False), ("sparse", False), ("sparse", True)])
def test_recomputed_core_same_loss_and_gradients(impl, jit_compile,
                                                 monkeypatch):
  # Under XLA the recomputation reads its inputs through an optimization
  # barrier (`chunking.chunked_recompute`); the function is the same,
  # dropout masks included. Two traced functions would draw different
  # per-call seeds, so the seed is fixed.
  monkeypatch.setattr(dropout_lib, "new_call_seed",
                      lambda: tf.constant([7, 11], tf.int32))
  config = tiny_config(num_hidden_layers=2, hidden_dropout_prob=0.2,
                       attention_probs_dropout_prob=0.2,
                       residual_attention=True)
  whole, recomputed = twin_models(config, recompute_attention=True)
  _assert_trains_alike(config, whole, recomputed, long_len=10, global_len=3,
                       seed=4, probe_seed=1, impl=impl,
                       jit_compile=jit_compile)


@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_xla_same_loss_and_gradients_as_graph(impl, monkeypatch):
  # Under XLA the relative scores' gradient is a masked sum per id for rows
  # of many keys (`relative_table.relative_scores`); here for every row.
  monkeypatch.setattr(relative_table, "MASKED_SUM_MIN_KEYS", 1)
  config = tiny_config(num_hidden_layers=2, residual_attention=True)
  model = tiny_model(config)
  randomize_relative_bias(model)
  _assert_trains_alike(config, model, model, long_len=10, global_len=3,
                       seed=4, probe_seed=1, impl=impl,
                       first_call=dict(use_function=True),
                       second_call=dict(jit_compile=True))


# ------------------------------------------------------ recomputed streams
@pytest.mark.parametrize("impl", ["sparse", "full"])
@pytest.mark.parametrize("chunk_len", [0, 3, 100])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_recomputed_streams_same_outputs_and_gradients(impl, chunk_len,
                                                       dropout):
  config = tiny_config(num_hidden_layers=3, residual_attention=True,
                       attention_probs_dropout_prob=dropout,
                       hidden_dropout_prob=dropout)
  sums, sources = twin_models(config, attention_chunk_len=chunk_len,
                              recompute_residual_streams=True)
  feats = random_features(config, batch=2, long_len=13, global_len=4, seed=3)
  probe = probes(config, 2, 13, 4)
  assert_same_training(loss_and_grads(sums, feats, probe, True, impl),
                       loss_and_grads(sources, feats, probe, True, impl))


def test_recomputed_streams_without_relative_ids():
  config = tiny_config(residual_attention=True)
  sums, sources = twin_models(config, attention_chunk_len=2,
                              recompute_residual_streams=True)
  feats = random_features(config, batch=1, long_len=9, global_len=3, seed=8,
                          with_relative_ids=False)
  probe = probes(config, 1, 9, 3)
  assert_same_training(loss_and_grads(sums, feats, probe, True),
                       loss_and_grads(sources, feats, probe, True))


def test_recomputed_streams_are_score_inputs_not_score_tensors():
  """What a layer hands to the next with recomputed streams: each earlier
  layer's [B, H, N, D] queries and keys and [B, N, R, H] scores per id,
  never an [N, keys] score tensor."""
  model = tiny_model(tiny_config(num_hidden_layers=3, residual_attention=True),
                     recompute_residual_streams=True)
  config = model.config
  feats = {k: tf.constant(v) for k, v in random_features(
      config, batch=1, long_len=12, global_len=3, seed=6).items()}
  long_x, global_x = model.embeddings(feats["token_ids"],
                                      feats["global_token_ids"])
  side = prepare_side_inputs(feats, batch_size=1, long_len=12, global_len=3,
                             local_radius=config.local_radius, sparse=True)
  streams = streams_lib.NO_STREAMS
  for index in range(2):
    block = model.blocks[index]
    long_x, global_x, streams, _ = block(long_x, global_x, side,
                                         streams=streams)
    assert isinstance(streams, streams_lib.RecomputedStreams)
    assert len(streams.sources) == index + 1
  relative_width = config.relative_vocab_size * config.num_attention_heads
  bound = 12 * max(config.hidden_size, relative_width)  # B = 1, L = 12
  for value in tf.nest.flatten(streams):
    assert value.shape.num_elements() <= bound, value.shape
  # The last layer asked for no streams returns none.
  _, _, last, _ = model.blocks[2](long_x, global_x, side, streams=streams,
                                  emit_streams=False)
  assert last is streams_lib.NO_STREAMS


def test_one_layer_is_the_same_with_any_stream_form():
  config = tiny_config(num_hidden_layers=1, residual_attention=True)
  sums, sources = twin_models(config, recompute_residual_streams=True)
  feats = random_features(config, batch=2, long_len=9, global_len=3, seed=9)
  for a, b in zip(sums(feats), sources(feats)):
    np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------- weights
@pytest.mark.parametrize("share_qkv,share_kv", [(True, False), (False, True),
                                                (False, False)])
def test_sharing_options_decide_which_projections_exist(share_qkv, share_kv):
  layer = attention_layer.FusedGlobalLocalAttention(
      hidden_size=8, num_attention_heads=2, size_per_head=4, local_radius=1,
      relative_vocab_size=8, attention_probs_dropout_prob=0.0,
      initializer="zeros",
      share_qkv_projections=share_qkv, share_kv_projections=share_kv)
  layer.build()
  names = {k.split("/")[0] for k in layer.official_variables()
           if k.endswith("projection/linear/kernel") or "_projection/" in k}
  if share_qkv:
    assert layer.projection("g2l_key") is layer.projection("l2l_key")
    assert "global_query_projection" not in names
  else:
    assert "global_query_projection" in names
    same = share_kv
    assert (layer.projection("g2l_key") is layer.projection("g2g_key")) == (
        same)
    assert (layer.projection("l2g_value") is
            layer.projection("l2l_value")) == same
