"""Tests for the WikiHop demo's training scaffold (bridge marks that fade),
on featurized synthetic hops=2 records."""

import random

import numpy as np
import pytest
import tensorflow as tf

from tasks.common import tokenization
from tasks.wikihop import data
from tasks.wikihop import features as F
from tasks.wikihop import preprocess
from tasks.wikihop import scaffold
from tasks.wikihop import synthetic

NUM_RECORDS = 6


@pytest.fixture(scope="module")
def featurized(tmp_path_factory):
  """hops=2 records, the vocabulary path and list, and stacked features
  (query subject typed)."""
  vocab_path = str(tmp_path_factory.mktemp("scaffold") / "vocab.txt")
  vocab = synthetic.vocabulary()
  tokenization.write_vocab(vocab_path, vocab)
  featurizer = preprocess.make_featurizer(vocab_path, None, 160, 48,
                                          mark_query_subject=True)
  rng = random.Random(11)
  records = [synthetic.make_example(rng, f"s{i}", hops=2)
             for i in range(NUM_RECORDS)]
  rows = [featurizer.featurize_record(data.validate_record(r, "mem", i))[0]
          for i, r in enumerate(records)]
  batch = {k: tf.constant(np.stack([row[k] for row in rows]))
           for k in ("token_ids", "segment_ids", "long_sentence_ids",
                     "label")}
  return records, vocab_path, vocab, batch


def _chain(record):
  """(village, city) of the query's chain, from the raw text."""
  return synthetic.query_chain(record)[:2]


def test_featurizer_types_the_query_village_once(featurized):
  records, _, vocab, batch = featurized
  seg, tok = batch["segment_ids"].numpy(), batch["token_ids"].numpy()
  for i, record in enumerate(records):
    typed = seg[i] == F.QUERY_SUBJECT_TOKEN_TYPE_ID
    assert [vocab[t] for t in tok[i][typed]] == [_chain(record)[0]]


def test_bridge_mentions_are_the_two_mentions_of_the_chain_city(featurized):
  records, vocab_path, vocab, batch = featurized
  s = scaffold.SyntheticBridgeScaffold(vocab_path)
  assert vocab[s.period_id] == "."
  bridge = scaffold.bridge_mentions(
      batch["token_ids"], batch["segment_ids"], batch["long_sentence_ids"],
      s.period_id).numpy()
  tok, seg = batch["token_ids"].numpy(), batch["segment_ids"].numpy()
  for i, record in enumerate(records):
    assert [vocab[t] for t in tok[i][bridge[i]]] == [_chain(record)[1]] * 2
    assert (seg[i][bridge[i]] == F.SENTENCE_TOKEN_TYPE_ID).all()


def test_no_typed_subject_no_bridge(featurized):
  _, vocab_path, _, batch = featurized
  s = scaffold.SyntheticBridgeScaffold(vocab_path)
  plain_seg = tf.where(
      tf.equal(batch["segment_ids"], F.QUERY_SUBJECT_TOKEN_TYPE_ID),
      F.SENTENCE_TOKEN_TYPE_ID, batch["segment_ids"])
  bridge = scaffold.bridge_mentions(batch["token_ids"], plain_seg,
                                    batch["long_sentence_ids"], s.period_id)
  assert not bridge.numpy().any()


def test_marks_hold_then_fade_to_none(featurized):
  _, vocab_path, _, batch = featurized
  s = scaffold.SyntheticBridgeScaffold(vocab_path, hold_steps=10,
                                       fade_steps=20, seed=3)
  seg = batch["segment_ids"].numpy()
  typed = lambda out: (out["segment_ids"].numpy() ==
                       F.QUERY_SUBJECT_TOKEN_TYPE_ID).sum(axis=1)
  held = s(dict(batch), tf.constant(10, tf.int64))
  # Village (1) + both bridge mentions (2) in every example.
  np.testing.assert_array_equal(typed(held), [3] * NUM_RECORDS)
  for name in ("token_ids", "long_sentence_ids", "label"):
    np.testing.assert_array_equal(held[name].numpy(), batch[name].numpy())
  gone = s(dict(batch), tf.constant(30, tf.int64))
  np.testing.assert_array_equal(gone["segment_ids"].numpy(), seg)
  assert float(s.mark_probability(tf.constant(20))) == pytest.approx(0.5)
  # The draw depends on (seed, step) only: a resumed run marks the same.
  again = [s(dict(batch), tf.constant(step, tf.int64))["segment_ids"].numpy()
           for step in (15, 15)]
  np.testing.assert_array_equal(again[0], again[1])


def test_rejects_negative_schedule(featurized):
  _, vocab_path, _, _ = featurized
  with pytest.raises(ValueError, match="must not be negative"):
    scaffold.SyntheticBridgeScaffold(vocab_path, hold_steps=-1)


def test_floor_keeps_a_fraction_marked():
  values = [float(scaffold.fade(tf.constant(s), 10, 20, floor=0.5))
            for s in (0, 10, 20, 30, 1000)]
  assert values == pytest.approx([1.0, 1.0, 0.75, 0.5, 0.5])
  with pytest.raises(ValueError, match="floor"):
    scaffold.SyntheticBridgeScaffold.__init__(object.__new__(
        scaffold.SyntheticBridgeScaffold), "unused", floor=1.5)
