"""Tests for tools.bench.benchmark_worker's inputs: WikiHop features made by the
task's own featurizer."""

import numpy as np
import tensorflow as tf

from etc_realformer.features import feature_names
from tasks.wikihop import features as wikihop
from tools.bench import benchmark_worker
import wikihop_testing


def test_wikihop_raw_features_are_the_featurizers():
  f = benchmark_worker.wikihop_raw_features(
      long_len=256, global_len=48, batch=2, vocab_size=300, seed=3)
  spec = wikihop.feature_spec(256, 48)
  for name in wikihop.MODEL_FEATURES + (wikihop.LABEL,):
    dtype, shape = spec[name]
    assert f[name].dtype == dtype.as_numpy_dtype
    assert f[name].shape == (2,) + shape
  # 10 candidates of 3 words, a 12-word query, then whole documents of 8
  # sentences of 16 words: 1 document fits (30 + 12 + 128 <= 256; 10 + 12
  # + 9 <= 48, a second would need 57 global tokens).
  assert f["real_long_tokens"] == 30 + 12 + 128
  assert f["real_global_tokens"] == 10 + 12 + 9
  ids = f[feature_names.GLOBAL_TOKEN_IDS][0]
  assert (ids[:10] == 4).all() and (ids[10:22] == 3).all()
  assert ids[22] == 5 and (ids[23:31] == 1).all()
  assert (f[feature_names.LONG_PARAGRAPH_BREAKPOINTS].sum(axis=1) == 10 + 1 + 1
          ).all()
  # The answer is one of the candidates; some sentences mention one.
  assert ((f[wikihop.LABEL] >= 0) & (f[wikihop.LABEL] < 10)).all()
  links = f[feature_names.L2G_LINKED_IDS][:, 42:]
  assert (links >= 0).any() and (links < 10).all()
  # Deterministic in the seed.
  again = benchmark_worker.wikihop_raw_features(256, 48, 2, 300, seed=3)
  for name in wikihop.MODEL_FEATURES:
    np.testing.assert_array_equal(again[name], f[name])


def test_wikihop_raw_features_feed_the_task_model():
  task = wikihop_testing.tiny_task()  # vocabulary of 50, L 32, G 8
  f = benchmark_worker.wikihop_raw_features(
      wikihop_testing.L, wikihop_testing.G, 2, 50, seed=0, num_candidates=2,
      candidate_len=1, query_len=2, sentences_per_doc=1, sentence_len=4)
  outputs = task.build_model()(
      {k: tf.constant(f[k]) for k in wikihop.MODEL_FEATURES}, training=False)
  assert outputs["logits"].shape == (2, wikihop_testing.G)
  assert np.isfinite(outputs["probabilities"].numpy()).all()
