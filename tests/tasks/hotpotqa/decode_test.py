"""Tests for tasks.hotpotqa.decode: span search, answer choice, text, grid
(the serving path's `raw_outputs`: in task_test.py, through `serve_raw`)."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from hotpotqa_testing import PREDICTED_RECORD as RECORD
from hotpotqa_testing import PREDICTION
from tasks.hotpotqa import decode
from tasks.hotpotqa import features as F


def _brute_force(start, end, sent, kinds, max_len):
  """Best (score, start, end) per global token by enumerating spans."""
  best = {}
  for i, j in itertools.product(range(len(start)), repeat=2):
    g = sent[i]
    if (g < 0 or kinds[g] not in (F.KIND_TITLE, F.KIND_SENTENCE) or
        sent[j] != g or j < i or j - i + 1 > max_len):
      continue
    score = start[i] * end[j]
    if g not in best or score > best[g][0]:
      best[g] = (score, i, j)
  return best


def test_sentence_best_spans_matches_brute_force():
  rng = np.random.default_rng(0)
  # Global: CLS, question, paragraph, title, sentence, sentence, pad, pad.
  kinds = np.array([1, 2, 3, 4, 5, 5, 0, 0])
  # Long: CLS, question, title (2), sentence 4 (5), sentence 5 (6), pad.
  sent = np.array([-1, 1, 3, 3] + [4] * 5 + [5] * 6 + [-1] * 3)
  starts_byte = np.arange(len(sent)) * 10
  ends_byte = starts_byte + 7
  for max_len in (1, 3, 20):
    start = rng.random([2, len(sent)]).astype(np.float32)
    end = rng.random([2, len(sent)]).astype(np.float32)
    out = decode.sentence_best_spans(
        tf.constant(start), tf.constant(end), tf.constant([sent, sent]),
        tf.constant([kinds, kinds]), tf.constant([starts_byte] * 2),
        tf.constant([ends_byte] * 2), max_len)
    out = {k: v.numpy() for k, v in out.items()}
    for b in range(2):
      best = _brute_force(start[b], end[b], sent, kinds, max_len)
      for g in range(len(kinds)):
        if g not in best:
          assert out["span_score"][b, g] == -1.0
          assert out["span_start"][b, g] == -1
          continue
        score, i, j = best[g]
        assert out["span_score"][b, g] == pytest.approx(score)
        assert (out["span_start"][b, g], out["span_end"][b, g]) == (i, j)
        assert out["span_start_byte"][b, g] == starts_byte[i]
        assert out["span_end_byte"][b, g] == ends_byte[j]


def test_select_answer_only_in_predicted_supporting_facts():
  sp = tf.constant([[0.9, 0.4, 0.6], [0.1, 0.2, 0.3]])
  score = tf.constant([[-1.0, 0.9, 0.5], [0.5, 0.5, 0.5]])
  # Example 0: token 1 scores best but is under the threshold; token 0 has
  # no span. Example 1: nothing admissible.
  np.testing.assert_array_equal(
      decode.select_answer(sp, score, 0.5).numpy(), [2, -1])
  np.testing.assert_array_equal(
      decode.select_answer(sp, score, 0.3).numpy(), [1, 2])


def test_decode_example_rules_and_text():
  answer, sp = decode.decode_example(PREDICTION, RECORD, threshold=0.5)
  # Sentence 0.1 scores best but is not a predicted fact; title 0 (0.2) is
  # not either: the span is sentence 0.0's, cut from the original string.
  assert answer == "Paris, France"
  assert sp == [["Café Noir", 0]]  # sentence tokens only
  answer, sp = decode.decode_example(PREDICTION, RECORD, threshold=0.15)
  assert answer == "Filler"  # sentence 0.1's bytes 0..6 (score 0.95)
  assert sp == [["Café Noir", 0], ["Café Noir", 1], ["Oslo", 0]]
  answer, _ = decode.decode_example(PREDICTION, RECORD, threshold=0.95)
  assert answer == ""  # no admissible text
  for probs, expected in (([0.1, 0.8, 0.1], "yes"), ([0.1, 0.1, 0.8], "no")):
    answer, _ = decode.decode_example(
        dict(PREDICTION, answer_type_probs=np.array(probs)), RECORD, 0.95)
    assert answer == expected
  # A title span keeps its accents and case.
  title_pred = dict(PREDICTION, sp_probs=np.where(
      np.arange(8) == 2, 0.99, 0.0), span_end_byte=np.array(
          [-1, -1, 5, 27, 6, -1, 4, 4]))
  answer, sp = decode.decode_example(title_pred, RECORD, threshold=0.5)
  assert answer == "Café" and sp == []


def test_search_threshold_and_predictions_json():
  gold = [RECORD.to_json()]
  examples = [PREDICTION]
  records = {"q1": RECORD}
  submission = decode.predictions_json(examples, records, 0.5)
  assert submission == {"answer": {"q1": "Paris, France"},
                        "sp": {"q1": [["Café Noir", 0]]}}
  search = decode.search_threshold(examples, records, gold, (0.3, 0.5, 0.9))
  # 0.3: the answer is sentence 0.1's ("Filler"): joint 0. 0.5: answer
  # precision 1/2, recall 1 ("paris france" vs "paris"); sp precision 1,
  # recall 1/2: joint precision 1/2, recall 1/2, F1 1/2. 0.9: nothing.
  assert search["best_threshold"] == 0.5
  assert search["best"]["joint_f1"] == pytest.approx(0.5)
  assert search["by_threshold"][0.3]["joint_f1"] == 0.0
  assert set(search["by_threshold"]) == {0.3, 0.5, 0.9}
  assert decode.gold_of(records) == gold
  assert decode.records_of([{"record_json": (
      '{"_id": "q1", "question": "Where?", "context": [["T", ["s."]]]}')
                             .encode()}])["q1"].titles == ("T",)
