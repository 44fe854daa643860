"""Tests for demos/wikihop/scaffold.py: the bridge marks (which tokens, on
what schedule) and the scaffold's task and model (marks in training only, a
checkpointed count of training calls), on featurized synthetic records."""

import random

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from demos.wikihop import scaffold
from demos.wikihop import synthetic
from etc_realformer import EtcConfig
from etc_realformer.errors import UserInputError
from etc_realformer.training import task as task_lib
from tasks.common.featurization import tokenization
from tasks.wikihop import data
from tasks.wikihop import features as F
from tasks.wikihop import preprocess

NUM_RECORDS = 6
L, G = 160, 48


@pytest.fixture(scope="module")
def featurized(tmp_path_factory):
  """hops=2 records, the vocabulary path and list, and stacked features
  (query subject typed)."""
  vocab_path = str(tmp_path_factory.mktemp("scaffold") / "vocab.txt")
  vocab = synthetic.vocabulary()
  tokenization.write_vocab(vocab_path, vocab)
  featurizer = preprocess.make_featurizer(vocab_path, None, L, G,
                                          mark_query_subject=True)
  rng = random.Random(11)
  records = [synthetic.make_example(rng, f"s{i}", hops=2)
             for i in range(NUM_RECORDS)]
  rows = [featurizer.featurize_record(data.validate_record(r, "mem", i))[0]
          for i, r in enumerate(records)]
  batch = {k: tf.constant(np.stack([row[k] for row in rows]))
           for k in F.MODEL_FEATURES + ("label",)}
  return records, vocab_path, vocab, batch


def _chain(record):
  """(village, city) of the query's chain, from the raw text."""
  return synthetic.query_chain(record)[:2]


def _period_id(vocab_path):
  return tokenization.make_tokenizer(vocab_path).token_id(".")


def _typed(features):
  """Per example, the tokens typed as the query's subject."""
  return (features["segment_ids"].numpy() ==
          F.QUERY_SUBJECT_TOKEN_TYPE_ID).sum(axis=1)


def test_featurizer_types_the_query_village_once(featurized):
  records, _, vocab, batch = featurized
  seg, tok = batch["segment_ids"].numpy(), batch["token_ids"].numpy()
  for i, record in enumerate(records):
    typed = seg[i] == F.QUERY_SUBJECT_TOKEN_TYPE_ID
    assert [vocab[t] for t in tok[i][typed]] == [_chain(record)[0]]


def test_bridge_mentions_are_the_two_mentions_of_the_chain_city(featurized):
  records, vocab_path, vocab, batch = featurized
  period_id = _period_id(vocab_path)
  assert vocab[period_id] == "."
  bridge = scaffold.bridge_mentions(
      batch["token_ids"], batch["segment_ids"], batch["long_sentence_ids"],
      period_id).numpy()
  tok, seg = batch["token_ids"].numpy(), batch["segment_ids"].numpy()
  for i, record in enumerate(records):
    assert [vocab[t] for t in tok[i][bridge[i]]] == [_chain(record)[1]] * 2
    assert (seg[i][bridge[i]] == F.SENTENCE_TOKEN_TYPE_ID).all()


def test_no_typed_subject_no_bridge(featurized):
  _, vocab_path, _, batch = featurized
  plain_seg = tf.where(
      tf.equal(batch["segment_ids"], F.QUERY_SUBJECT_TOKEN_TYPE_ID),
      F.SENTENCE_TOKEN_TYPE_ID, batch["segment_ids"])
  bridge = scaffold.bridge_mentions(batch["token_ids"], plain_seg,
                                    batch["long_sentence_ids"],
                                    _period_id(vocab_path))
  assert not bridge.numpy().any()


def test_marks_hold_then_fade_to_none(featurized):
  _, vocab_path, _, batch = featurized
  marks = scaffold.BridgeMarks(_period_id(vocab_path), hold_steps=10,
                               fade_steps=20, seed=3)
  held = marks(dict(batch), tf.constant(10, tf.int64))
  # Village (1) + both bridge mentions (2) in every example.
  np.testing.assert_array_equal(_typed(held), [3] * NUM_RECORDS)
  for name in ("token_ids", "long_sentence_ids", "label"):
    np.testing.assert_array_equal(held[name].numpy(), batch[name].numpy())
  gone = marks(dict(batch), tf.constant(30, tf.int64))
  np.testing.assert_array_equal(gone["segment_ids"].numpy(),
                                batch["segment_ids"].numpy())
  assert float(marks.mark_probability(tf.constant(20))) == pytest.approx(0.5)
  # The draw depends on (seed, step) only: a resumed run marks the same.
  again = [marks(dict(batch), tf.constant(15, tf.int64))["segment_ids"]
           .numpy() for _ in range(2)]
  np.testing.assert_array_equal(again[0], again[1])


def test_schedule_checks_and_the_floor():
  with pytest.raises(UserInputError, match="must not be negative"):
    scaffold.BridgeMarks(15, hold_steps=-1)
  with pytest.raises(UserInputError, match="floor"):
    scaffold.BridgeMarks(15, floor=1.5)
  values = [float(scaffold.fade(tf.constant(s), 10, 20, floor=0.5))
            for s in (0, 10, 20, 30, 1000)]
  assert values == pytest.approx([1.0, 1.0, 0.75, 0.5, 0.5])


def _scaffold_task(vocab_path, **kwargs):
  # A wide initialisation, so that the marks move the outputs well beyond
  # float rounding. Seeded: how far they move depends on the draw (over
  # seeds 0-11 the relative move ranges from 0.004 to 0.075, and an
  # unlucky unseeded draw fell below the test's 1e-3).
  tf_keras.utils.set_random_seed(1)
  config = EtcConfig(vocab_size=600, hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32,
                     local_radius=4, relative_pos_max_distance=2,
                     relative_vocab_size=8, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, initializer_range=0.2)
  return scaffold.WikiHopBridgeScaffoldTask(
      model_config=config, vocab_file=vocab_path, long_seq_len=L,
      global_seq_len=G, mark_query_subject=True, **kwargs)


def test_scaffold_task_is_registered_for_gin():
  assert task_lib.get_task_class("wikihop_bridge_scaffold") is (
      scaffold.WikiHopBridgeScaffoldTask)


def test_model_marks_in_training_only_and_counts_training_calls(featurized):
  _, vocab_path, _, batch = featurized
  # Every example marked in training calls 0 and 1 (up to hold_steps = 1
  # inclusive), none from call 2 on.
  task = _scaffold_task(vocab_path, hold_steps=1, fade_steps=0)
  model = task.build_model()
  marked = task.build_marks()(batch, tf.constant(0))
  assert (_typed(marked) == 3).all()

  is_candidate = batch["candidate_mask"].numpy() > 0

  def logits(features, training):
    """The candidates' logits (the others are a constant -1e9)."""
    return model(features, training=training)["logits"].numpy()[is_candidate]

  plain = logits(batch, False)
  with_marks = logits(marked, False)
  assert int(model.training_calls.numpy()) == 0  # eval calls do not count
  # The marks move the logits by far more than float rounding (the
  # tolerance below, a thousandth of that move); no dropout: training =
  # inference.
  moved = np.abs(with_marks - plain).max()
  assert moved > 1e-3 * np.abs(plain).max()
  for _ in range(2):
    np.testing.assert_allclose(logits(batch, True), with_marks,
                               atol=1e-3 * moved)
  np.testing.assert_allclose(logits(batch, True), plain, atol=1e-3 * moved)
  assert int(model.training_calls.numpy()) == 3


def test_training_calls_are_checkpointed(featurized, tmp_path):
  _, vocab_path, _, batch = featurized
  task = _scaffold_task(vocab_path)
  model = task.build_model()
  for _ in range(3):
    model(batch, training=True)
  path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
  resumed = task.build_model()
  resumed(batch, training=False)
  tf.train.Checkpoint(model=resumed).restore(path).assert_consumed()
  assert int(resumed.training_calls.numpy()) == 3


def test_vocabulary_without_a_period_is_named(tmp_path):
  vocab = tmp_path / "vocab.txt"
  tokenization.write_vocab(str(vocab), ["[PAD]", "[UNK]", "a"])
  with pytest.raises(UserInputError, match=r"vocab.txt: no '\.'"):
    _scaffold_task(str(vocab)).build_marks()
