"""`EtcConfig.recompute_residual_streams`: residual attention carried as the
earlier layers' score inputs, recomputed where read, computes the same
function and gradients as the materialized running sums."""

import numpy as np
import pytest

from encoder_testing import random_features, tiny_config
from etc_realformer import EtcModel
from etc_realformer.layers import attention
from test_attention_chunking import (_assert_same, _loss_and_grads, _probes,
                                     _twin)


@pytest.mark.parametrize("impl", ["sparse", "full"])
@pytest.mark.parametrize("chunk_len", [0, 3, 100])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_same_outputs_and_gradients(impl, chunk_len, dropout):
  config = tiny_config(num_hidden_layers=3, residual_attention=True,
                       attention_chunk_len=chunk_len,
                       attention_probs_dropout_prob=dropout,
                       hidden_dropout_prob=dropout)
  plain, recomputed = _twin(config, recompute_residual_streams=True)
  # Padding, fully masked rows (random_features makes both).
  feats = random_features(config, batch=2, long_len=13, global_len=4, seed=3)
  probes = _probes(config, 2, 13, 4)
  _assert_same(_loss_and_grads(plain, feats, probes, True, impl),
               _loss_and_grads(recomputed, feats, probes, True, impl))


@pytest.mark.parametrize("pattern", ["l2l", "l2g", "g2g", "g2l"])
def test_each_stream_alone(pattern):
  config = tiny_config(num_hidden_layers=4, residual_attention=True,
                       residual_patterns=(pattern,), attention_chunk_len=4,
                       attention_probs_dropout_prob=0.2)
  plain, recomputed = _twin(config, recompute_residual_streams=True)
  feats = random_features(config, batch=2, long_len=10, global_len=4, seed=2)
  probes = _probes(config, 2, 10, 4)
  _assert_same(_loss_and_grads(plain, feats, probes, True),
               _loss_and_grads(recomputed, feats, probes, True))


@pytest.mark.parametrize("period", [0, 1, 2])
def test_in_tf_function_with_checkpointing(period):
  config = tiny_config(num_hidden_layers=4, residual_attention=True,
                       attention_chunk_len=5,
                       attention_probs_dropout_prob=0.2,
                       hidden_dropout_prob=0.1)
  plain, recomputed = _twin(config, recompute_residual_streams=True,
                            grad_checkpointing_period=period)
  feats = random_features(config, batch=2, long_len=17, global_len=5, seed=4)
  probes = _probes(config, 2, 17, 5)
  _assert_same(
      _loss_and_grads(plain, feats, probes, True, use_function=True),
      _loss_and_grads(recomputed, feats, probes, True, use_function=True))


def test_without_relative_ids():
  config = tiny_config(residual_attention=True, attention_chunk_len=2)
  plain, recomputed = _twin(config, recompute_residual_streams=True)
  feats = random_features(config, batch=1, long_len=9, global_len=3, seed=8,
                          with_relative_ids=False)
  probes = _probes(config, 1, 9, 3)
  _assert_same(_loss_and_grads(plain, feats, probes, True),
               _loss_and_grads(recomputed, feats, probes, True))


def test_no_stream_tensor_crosses_layers(monkeypatch):
  """What a layer hands to the next is [B, H, N, D]- / [B, N, R, H]-sized
  score inputs, and the layers after the first take the chunked core with
  them (the sums exist one chunk at a time)."""
  config = tiny_config(num_hidden_layers=3, residual_attention=True,
                       recompute_residual_streams=True)
  model = EtcModel(config)
  model.build()
  feats = random_features(config, batch=1, long_len=12, global_len=3, seed=6)
  seen = []
  original = attention.FusedGlobalLocalAttention._attend_chunked

  def spy(self, t, streams, side, carried, num_summed, running_mean,
          training, seed, emit_streams, num_chunks, sources=(), fused=False):
    seen.append((len(sources), dict(streams), emit_streams))
    return original(self, t, streams, side, carried, num_summed,
                    running_mean, training, seed, emit_streams, num_chunks,
                    sources, fused)

  monkeypatch.setattr(attention.FusedGlobalLocalAttention, "_attend_chunked",
                      spy)
  model(feats, att_implementation="sparse")
  # Layers 2 and 3 recompute from 1 and 2 earlier layers, chunked; they are
  # given no materialized sums and asked for none.
  assert [(n, sorted(s), e) for n, s, e in seen] == [
      (1, [attention.SOURCES], False), (2, [attention.SOURCES], False)]
  relative_width = config.relative_vocab_size * config.num_attention_heads
  bound = 12 * max(config.hidden_size, relative_width)  # B = 1, L = 12
  for src in seen[1][1][attention.SOURCES]:
    for name, value in src.items():
      # Queries/keys [B, H, N, D] and scores per id [B, N, R, H]: never a
      # [N, keys] score tensor.
      assert value.shape.num_elements() <= bound, name


def test_first_layer_and_no_residual_are_unchanged():
  config = tiny_config(num_hidden_layers=1, residual_attention=True)
  plain, recomputed = _twin(config, recompute_residual_streams=True)
  feats = random_features(config, batch=2, long_len=9, global_len=3, seed=9)
  for a, b in zip(plain(feats), recomputed(feats)):
    np.testing.assert_array_equal(a, b)
