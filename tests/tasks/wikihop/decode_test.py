"""Tests for tasks.wikihop.decode: the chosen candidate and the submission."""

import tensorflow as tf

from tasks.wikihop import decode


def test_chosen_candidate_batched_and_single():
  candidates = tf.constant([[b"a", b"b", b"c"], [b"d", b"e", b""]])
  got = decode.chosen_candidate(candidates, tf.constant([2, -1]))
  assert got.numpy().tolist() == [b"c", b""]
  assert decode.chosen_candidate(tf.constant(["x", "y"]),
                                 tf.constant(1)).numpy() == b"y"


def test_by_id_is_the_submission_format():
  assert decode.by_id([b"q1", b"q2"], [b"caf\xc3\xa9", b"b"]) == {
      "q1": "café", "q2": "b"}
