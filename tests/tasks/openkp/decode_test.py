"""Tests for tasks.openkp.decode: the cells a phrase may come from, and the
top distinct keyphrases in the graph against the Python decoding."""

import numpy as np
import pytest
import tensorflow as tf

from tasks.openkp import decode
from tasks.openkp import head


def test_cell_validity_matches_numpy():
  words = np.array([["a", "b", "", "c", "d", ""], ["x", "y", "z", "", "", ""]])
  num_words = np.array([5, 3], np.int32)
  max_words, length = 3, 7
  valid = decode.cell_validity(tf.constant(words), tf.constant(num_words),
                               max_words, length).numpy()
  assert valid.shape == (2, max_words, length)
  # Cell (n - 1, s): words s .. s + n - 1 all kept and non-empty.
  expected = np.zeros_like(valid)
  for b in range(2):
    kept = [bool(w) and i < num_words[b] for i, w in enumerate(words[b])]
    kept += [False] * (length - len(kept))
    for n in range(1, max_words + 1):
      for s in range(length):
        expected[b, n - 1, s] = s + n <= length and all(kept[s:s + n])
  np.testing.assert_array_equal(valid, expected)
  # Fewer word slots than the logits' length: the rest are invalid.
  assert not decode.cell_validity(tf.constant(words[:, :2]),
                                  tf.constant(num_words), 2, 4).numpy()[
                                      :, :, 2:].any()


def test_decoding_matches_python_and_takes_distinct_lowercased_phrases():
  rng = np.random.default_rng(0)
  words = ["The", "cat", "", "the", "CAT", "sat", "the", "cat", "Zoë"]
  logits = rng.normal(size=[2, 5, 12]).astype(np.float32)
  # Make "the cat" (words 0-1 and 3-4 and 6-7) the top three cells.
  logits[0, 1, [0, 3, 6]] = [10, 9, 8]
  logits[0, 0, 8] = 7.5  # "zoë"
  num_words = np.array([9, 4])
  padded = np.array([words, words[:4] + [""] * 5])
  phrases, scores, starts, lengths = decode.top_phrases(
      tf.constant(logits), tf.constant(padded), tf.constant(num_words),
      num_candidates=30)
  for b in range(2):
    expected = decode.top_phrases_py(logits[b], list(padded[b][:num_words[b]]),
                                     num_candidates=30)
    got = [p.decode() for p in phrases.numpy()[b] if p]
    assert got == [e[0] for e in expected]
    assert starts.numpy()[b][:len(got)].tolist() == [e[1] for e in expected]
    assert lengths.numpy()[b][:len(got)].tolist() == [e[2] for e in expected]
  first = [p.decode() for p in phrases.numpy()[0]]
  assert first[:2] == ["the cat", "zoë"] and len(set(first)) == 5
  assert all("  " not in p and not p.startswith(" ") for p in first)
  # Scores: softmax probabilities of the chosen cells, best first.
  flat = tf.nn.softmax(logits.reshape(2, -1)).numpy()
  assert scores.numpy()[0, 0] == pytest.approx(flat[0, 1 * 12 + 0])
  assert (np.diff(scores.numpy()[0]) <= 0).all()
  # Document 1 has 4 words, one of them empty: "the", "cat", "the cat"
  # ("" blocks every longer cell; the second "the" repeats): 3 phrases.
  second = [p.decode() for p in phrases.numpy()[1] if p]
  assert sorted(second) == ["cat", "the", "the cat"]
  assert lengths.numpy()[1][3:].tolist() == [-1, -1]
  assert scores.numpy()[1][3:].tolist() == [0.0, 0.0]


def test_few_candidates_and_phrases():
  # Only the best `num_candidates` cells are read; repeats use up
  # candidates without giving phrases.
  words = ["a", "b", "a", "b"]
  logits = np.full([2, 4], -5.0, np.float32)
  logits[0, [0, 2, 1]] = [3.0, 2.0, 1.0]  # "a", "a" again, "b"
  expected = decode.top_phrases_py(logits, words, num_phrases=5,
                                   num_candidates=2)
  assert [e[0] for e in expected] == ["a"]
  phrases, _, starts, lengths = decode.top_phrases(
      tf.constant(logits[None]), tf.constant([words]), tf.constant([4]),
      num_phrases=2, num_candidates=3)
  assert phrases.numpy().tolist() == [[b"a", b"b"]]
  assert starts.numpy().tolist() == [[0, 1]]
  assert lengths.numpy().tolist() == [[1, 1]]


def test_decoding_a_document_without_words():
  logits = np.full([1, 5, 8], head.NEG_INF, np.float32)
  phrases, scores, starts, _ = decode.top_phrases(
      tf.constant(logits), tf.zeros([1, 0], tf.string), tf.constant([0]))
  assert phrases.numpy().tolist() == [[b""] * 5]
  assert scores.numpy().tolist() == [[0.0] * 5]
  assert starts.numpy().tolist() == [[-1] * 5]
