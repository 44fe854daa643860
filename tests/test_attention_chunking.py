"""Chunked attention (`EtcConfig.attention_chunk_len`) computes the same
function, gradients and dropout masks as the unchunked sparse path."""

import json

import numpy as np
import pytest
import tensorflow as tf

from encoder_testing import (max_abs_diff, numpy_reference, random_features,
                             randomize_relative_bias, tiny_config,
                             model_weights, spy_chunked_calls)
from etc_realformer import EtcModel
from etc_realformer import config as etc_config
from etc_realformer.layers import attention


def _twin(config, **changes):
  """Two models with the same weights: `config` and `config` + changes."""
  a = EtcModel(config)
  a.build()
  randomize_relative_bias(a)
  b = EtcModel(config.replace(**changes))
  b.build()
  targets = b.official_variables()
  for name, var in a.official_variables().items():
    targets[name].assign(var)
  return a, b


def _loss_and_grads(model, feats, probes, training, impl="sparse",
                    use_function=False):
  def step():
    tf.random.set_seed(1234)  # the per-call dropout seed is drawn from here
    with tf.GradientTape() as tape:
      outs = model(feats, training=training, att_implementation=impl)
      loss = sum(tf.reduce_sum(o * p) for o, p in zip(outs, probes))
    return outs, loss, tape.gradient(loss, model.trainable_variables)
  if use_function:
    step = tf.function(step)
  outs, loss, grads = step()
  return ([o.numpy() for o in outs], float(loss),
          [None if g is None else tf.convert_to_tensor(g).numpy()
           for g in grads])


def _probes(config, batch, long_len, global_len):
  rng = np.random.RandomState(0)
  return (rng.normal(size=[batch, long_len, config.hidden_size]).astype(
      np.float32),
          rng.normal(size=[batch, global_len, config.hidden_size]).astype(
              np.float32))


def _assert_same(a, b):
  outs_a, loss_a, grads_a = a
  outs_b, loss_b, grads_b = b
  for x, y in zip(outs_a, outs_b):
    assert np.isfinite(y).all()
    np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-5)
  assert abs(loss_a - loss_b) < 1e-5 * max(1.0, abs(loss_a))
  for ga, gb in zip(grads_a, grads_b):
    assert (ga is None) == (gb is None)
    if ga is not None:
      # Gradients of a few hundred are sums of larger terms, and the two
      # paths (or two runs: the executor may add partial gradients in any
      # order) round them differently: float32 noise scales with the
      # gradient's magnitude, hence the 1e-6 * max |g| allowance.
      atol = 1e-5 + 1e-6 * float(np.abs(ga).max())
      np.testing.assert_allclose(ga, gb, atol=atol, rtol=1e-5)


# (radius, long_len, global_len, chunk_len): chunks of one block and of
# several, a last chunk shorter than the others, a length that is not a
# multiple of the block, more chunks than global rows.
CASES = [(1, 7, 4, 2), (2, 13, 4, 3), (2, 12, 5, 6), (3, 16, 3, 4),
         (2, 11, 4, 100)]


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("radius,long_len,global_len,chunk_len", CASES)
def test_chunked_equals_unchunked(residual, dropout, radius, long_len,
                                  global_len, chunk_len):
  config = tiny_config(num_hidden_layers=3, local_radius=radius,
                       residual_attention=residual,
                       attention_probs_dropout_prob=dropout,
                       hidden_dropout_prob=dropout)
  plain, chunked = _twin(config, attention_chunk_len=chunk_len)
  # Padding, fully masked rows (random_features makes both).
  feats = random_features(config, batch=2, long_len=long_len,
                          global_len=global_len, seed=radius + long_len)
  probes = _probes(config, 2, long_len, global_len)
  ref = _loss_and_grads(plain, feats, probes, training=True)
  _assert_same(ref, _loss_and_grads(chunked, feats, probes, training=True))
  if dropout:
    # Dropout really was on.
    eval_ref = _loss_and_grads(plain, feats, probes, training=False)
    assert abs(eval_ref[1] - ref[1]) > 1e-3


@pytest.mark.parametrize("running_mean", [False, True])
@pytest.mark.parametrize("changes", [
    dict(attention_chunk_len=3),
    # Recomputed residual streams (tests/test_residual_stream_recompute.py),
    # chunked and as one chunk.
    dict(attention_chunk_len=3, recompute_residual_streams=True),
    dict(recompute_residual_streams=True)])
def test_chunked_matches_numpy_reference_and_full(running_mean, changes):
  config = tiny_config(num_hidden_layers=3, residual_attention=True,
                       residual_running_mean=running_mean, **changes)
  model = EtcModel(config)
  model.build()
  randomize_relative_bias(model)
  feats = random_features(config, batch=2, long_len=14, global_len=4, seed=5)
  long_out, global_out = model(feats, att_implementation="sparse")
  ref_long, ref_global = numpy_reference(model_weights(model), config, feats)
  mask = None
  assert max_abs_diff(long_out, ref_long, mask) < 1e-5
  assert max_abs_diff(global_out, ref_global, mask) < 1e-5
  full = model(feats, att_implementation="full")
  assert max_abs_diff(long_out, full[0]) < 1e-5
  assert max_abs_diff(global_out, full[1]) < 1e-5


@pytest.mark.parametrize("pattern", ["l2l", "l2g", "g2g", "g2l"])
def test_each_stream_alone(pattern):
  config = tiny_config(num_hidden_layers=3, residual_attention=True,
                       residual_patterns=(pattern,),
                       attention_probs_dropout_prob=0.2)
  plain, chunked = _twin(config, attention_chunk_len=3)
  feats = random_features(config, batch=2, long_len=10, global_len=4, seed=2)
  probes = _probes(config, 2, 10, 4)
  _assert_same(_loss_and_grads(plain, feats, probes, training=True),
               _loss_and_grads(chunked, feats, probes, training=True))


@pytest.mark.parametrize("period", [0, 1])
def test_chunked_in_tf_function_with_checkpointing(period):
  config = tiny_config(num_hidden_layers=3, residual_attention=True,
                       attention_probs_dropout_prob=0.2,
                       hidden_dropout_prob=0.1)
  plain, chunked = _twin(config, attention_chunk_len=4,
                         grad_checkpointing_period=period)
  feats = random_features(config, batch=2, long_len=17, global_len=5, seed=4)
  probes = _probes(config, 2, 17, 5)
  _assert_same(
      _loss_and_grads(plain, feats, probes, training=True, use_function=True),
      _loss_and_grads(chunked, feats, probes, training=True,
                      use_function=True))


def test_without_relative_ids_and_side_inputs():
  config = tiny_config(residual_attention=True)
  plain, chunked = _twin(config, attention_chunk_len=2)
  feats = random_features(config, batch=1, long_len=9, global_len=3, seed=8,
                          with_relative_ids=False)
  for key in ("l2g_att_mask", "g2l_att_mask"):
    del feats[key]
  probes = _probes(config, 1, 9, 3)
  _assert_same(_loss_and_grads(plain, feats, probes, training=False),
               _loss_and_grads(chunked, feats, probes, training=False))


@pytest.mark.parametrize("changes", [
    dict(attention_chunk_len=2),
    # Recomputed streams are built whole for the probabilities.
    dict(attention_chunk_len=2, recompute_residual_streams=True)])
def test_probs_request_uses_the_unchunked_path(changes):
  config = tiny_config(num_hidden_layers=3, residual_attention=True)
  plain, chunked = _twin(config, **changes)
  feats = random_features(config, batch=2, long_len=9, global_len=3, seed=1)
  _, _, probs_a = plain(feats, att_implementation="sparse",
                        return_attention_probs=True)
  _, _, probs_b = chunked(feats, att_implementation="sparse",
                          return_attention_probs=True)
  assert_same_probs(probs_a, probs_b)


def assert_same_probs(probs_a, probs_b):
  """Per layer and pattern, probabilities equal to 1e-6."""
  assert len(probs_a) == len(probs_b)
  for layer_a, layer_b in zip(probs_a, probs_b):
    assert sorted(layer_a) == sorted(layer_b)
    for pattern in layer_a:
      assert max_abs_diff(layer_a[pattern], layer_b[pattern]) < 1e-6


def test_row_keep_mask_pieces_equal_the_whole():
  seed = tf.constant([7, 11], tf.int32)
  shape = tf.constant([2, 3, 5], tf.int32)
  whole = attention._row_keep_mask(seed, 3, 0.3, 0, 9, shape).numpy()
  assert whole.shape == (9, 2, 3, 5)
  assert 0.5 < whole.mean() < 0.9
  for start, size in ((0, 1), (1, 3), (4, 5), (8, 1)):
    piece = attention._row_keep_mask(seed, 3, 0.3, start, size, shape)
    np.testing.assert_array_equal(piece.numpy(), whole[start:start + size])
  other = attention._row_keep_mask(seed, 4, 0.3, 0, 9, shape).numpy()
  assert (other != whole).any()


def test_config_rejects_negative_chunk_len():
  with pytest.raises(ValueError, match="attention_chunk_len"):
    tiny_config(attention_chunk_len=-1)


@pytest.mark.parametrize("bad", ["fast", 2.5, True, None])
def test_config_rejects_other_chunk_settings(bad):
  with pytest.raises(ValueError, match="attention_chunk_len"):
    tiny_config(attention_chunk_len=bad)


def test_auto_chunk_len_by_length():
  config = tiny_config()
  assert config.attention_chunk_len == "auto"
  auto_max = etc_config.AUTO_UNCHUNKED_MAX_LEN
  assert config.chunk_len_for(auto_max) == 0
  assert config.chunk_len_for(auto_max + 1) == etc_config.AUTO_CHUNK_LEN
  assert config.chunk_len_for(16384) == etc_config.AUTO_CHUNK_LEN
  assert config.chunk_len_for(tf.constant(16384)) == 0  # dynamic: unchunked
  assert config.replace(attention_chunk_len=0).chunk_len_for(16384) == 0
  assert config.replace(attention_chunk_len=512).chunk_len_for(100) == 512
  again = etc_config.EtcConfig.from_dict(
      json.loads(config.to_json_string()))
  assert again.attention_chunk_len == "auto"


@pytest.mark.parametrize("long_len,expect_chunked", [(7, False), (13, True)])
def test_auto_chunk_len_chunks_long_inputs_only(monkeypatch, long_len,
                                                expect_chunked):
  # Small thresholds, so that a tiny model crosses them.
  monkeypatch.setattr(etc_config, "AUTO_UNCHUNKED_MAX_LEN", 8)
  monkeypatch.setattr(etc_config, "AUTO_CHUNK_LEN", 3)
  config = tiny_config(num_hidden_layers=2, local_radius=2,
                       residual_attention=True,
                       attention_probs_dropout_prob=0.3,
                       attention_chunk_len=0)
  plain, auto = _twin(config, attention_chunk_len="auto")
  calls = spy_chunked_calls(monkeypatch)
  feats = random_features(config, batch=2, long_len=long_len, global_len=4,
                          seed=long_len)
  probes = _probes(config, 2, long_len, 4)
  calls_before = len(calls)
  ref = _loss_and_grads(plain, feats, probes, training=True)
  assert len(calls) == calls_before  # chunk 0: never chunked
  _assert_same(ref, _loss_and_grads(auto, feats, probes, training=True))
  if expect_chunked:
    assert calls and set(calls) == {-(-long_len // 3)}
  else:
    assert not calls
