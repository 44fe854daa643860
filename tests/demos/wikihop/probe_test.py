"""Tests for demos/wikihop/probe.py's controls: the marks land on exactly the
tokens their docstrings name, on real featurized synthetic records."""

import random

import numpy as np
import pytest
import tensorflow as tf

from demos.wikihop import probe
from demos.wikihop import synthetic
from tasks.common.featurization import tokenization
from tasks.wikihop import data
from tasks.wikihop import features as F
from tasks.wikihop import preprocess


@pytest.fixture(scope="module")
def featurized(tmp_path_factory):
  """Four hops=2 records, their vocabulary and their stacked features."""
  vocab_path = str(tmp_path_factory.mktemp("probe") / "vocab.txt")
  vocab = synthetic.vocabulary()
  tokenization.write_vocab(vocab_path, vocab)
  featurizer = preprocess.make_featurizer(vocab_path, None, 160, 48)
  rng = random.Random(5)
  records = [synthetic.make_example(rng, f"p{i}", hops=2) for i in range(4)]
  rows = [featurizer.featurize_record(data.validate_record(r, "mem", i))[0]
          for i, r in enumerate(records)]
  batch = {k: tf.constant(np.stack([row[k] for row in rows]))
           for k in ("token_ids", "segment_ids", "long_sentence_ids",
                     "l2g_linked_ids", "label")}
  return records, vocab, batch


def _bridge_city(record):
  """The city in the query village's fact sentence, from the raw text."""
  return synthetic.query_chain(record)[1]


def test_vocabulary_ids_the_probe_relies_on(featurized):
  _, vocab, _ = featurized
  assert vocab[probe.PERIOD_ID] == "."
  assert vocab[probe.MARK_ID] == "[unused5]"


def test_marked_chain_marks_village_and_both_bridge_mentions(featurized):
  records, vocab, batch = featurized
  out = probe.diagnostic_batch(dict(batch), "marked_chain")
  before, after = batch["token_ids"].numpy(), out["token_ids"].numpy()
  seg = batch["segment_ids"].numpy()
  np.testing.assert_array_equal(out["label"].numpy(), batch["label"].numpy())
  for i, record in enumerate(records):
    changed = before[i] != after[i]
    assert (after[i][changed] == probe.MARK_ID).all()
    # Never the query itself.
    assert (seg[i][changed] == F.SENTENCE_TOKEN_TYPE_ID).all()
    marked_words = sorted(vocab[t] for t in before[i][changed])
    village = record["query"].split()[-1]
    # The village is named in one document, the bridge city in two.
    assert marked_words == sorted([village] + [_bridge_city(record)] * 2)


def test_marked_chain_bridge_and_village_marks_fade_separately(featurized):
  _, _, batch = featurized
  before = batch["token_ids"].numpy()
  only_bridge = probe.diagnostic_batch(dict(batch), "marked_chain",
                                       mark_prob=tf.constant(0.0),
                                       bridge_mark_prob=tf.constant(1.0))
  only_village = probe.diagnostic_batch(dict(batch), "marked_chain",
                                        mark_prob=tf.constant(1.0),
                                        bridge_mark_prob=tf.constant(0.0))
  village_only = probe.diagnostic_batch(dict(batch), "marked_query_mentions")
  np.testing.assert_array_equal(only_village["token_ids"].numpy(),
                                village_only["token_ids"].numpy())
  bridge_count = (only_bridge["token_ids"].numpy() != before).sum(axis=1)
  np.testing.assert_array_equal(bridge_count, [2] * len(before))
  none = probe.diagnostic_batch(dict(batch), "marked_chain",
                                mark_prob=tf.constant(0.0),
                                bridge_mark_prob=tf.constant(0.0))
  np.testing.assert_array_equal(none["token_ids"].numpy(), before)


def test_marked_chain_by_token_type_marks_the_same_tokens(featurized):
  _, _, batch = featurized
  by_token = probe.diagnostic_batch(dict(batch), "marked_chain")
  by_type = probe.diagnostic_batch(dict(batch), "marked_chain",
                                   marking="type")
  np.testing.assert_array_equal(by_type["token_ids"].numpy(),
                                batch["token_ids"].numpy())
  replaced = by_token["token_ids"].numpy() != batch["token_ids"].numpy()
  typed = by_type["segment_ids"].numpy() == probe.MARK_TYPE
  assert replaced.any()
  np.testing.assert_array_equal(typed, replaced)
