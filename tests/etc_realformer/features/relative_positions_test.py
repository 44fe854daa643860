"""Tests for the relative position ids."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.features import relative_positions as rp


def test_id_constants():
  # M = 12 is the base config: 25 distance ids, then 25, 26, 27.
  assert rp.distance_vocab_size(12) == 25
  assert rp.other_sentence_id(12) == 25
  assert rp.own_sentence_id(12) == 26
  assert rp.cross_paragraph_id(12) == 27


def test_pattern_wider_than_max_distance():
  # Offsets -5..5, M = 3: left clips to 2M = 6, right clips to M = 3.
  np.testing.assert_array_equal(
      rp.make_relative_id_pattern(11, 3), [6, 6, 6, 5, 4, 0, 1, 2, 3, 3, 3])


def test_pattern_narrower_than_max_distance():
  # Offsets -1..1 with M = 3: no clipping, left neighbour is M + 1 = 4.
  np.testing.assert_array_equal(rp.make_relative_id_pattern(3, 3), [4, 0, 1])


def test_pattern_max_distance_zero():
  np.testing.assert_array_equal(rp.make_relative_id_pattern(5, 0), [0] * 5)


@pytest.mark.parametrize("window_size", [0, 4, -3])
def test_pattern_bad_window(window_size):
  with pytest.raises(ValueError, match="window_size"):
    rp.make_relative_id_pattern(window_size, 2)


def test_full_relative_ids():
  expected = [
      [0, 1, 2, 3, 3, 3],
      [4, 0, 1, 2, 3, 3],
      [5, 4, 0, 1, 2, 3],
      [6, 5, 4, 0, 1, 2],
      [6, 6, 5, 4, 0, 1],
      [6, 6, 6, 5, 4, 0],
  ]
  ids = rp.make_relative_att_ids(6, 3, batch_size=2)
  assert ids.shape == (2, 6, 6)
  np.testing.assert_array_equal(ids, [expected, expected])


def test_local_relative_ids_same_on_every_row():
  ids = rp.make_local_relative_att_ids(4, local_radius=2, max_distance=1,
                                       batch_size=1)
  np.testing.assert_array_equal(ids, [[[2, 2, 0, 1, 1]] * 4])


def test_overwrite_outside_segments():
  ids = rp.make_relative_att_ids(4, 1)
  out = rp.overwrite_relative_att_ids_outside_segments(ids, [[5, 5, 7, 7]], 9)
  np.testing.assert_array_equal(
      out, [[[0, 1, 9, 9], [2, 0, 9, 9], [9, 9, 0, 1], [9, 9, 2, 0]]])


def test_negative_max_distance():
  with pytest.raises(ValueError, match="relative_pos_max_distance"):
    rp.make_relative_att_ids(3, -1)


@pytest.mark.parametrize("make", [
    lambda n, b: rp.make_relative_att_ids(n, 2, batch_size=b),
    lambda n, b: rp.make_local_relative_att_ids(n, 1, 2, batch_size=b),
])
def test_empty_sequence_or_batch_raises_as_the_original(make):
  with pytest.raises(ValueError, match="seq_len must be positive, got 0"):
    make(0, 1)
  with pytest.raises(ValueError, match="batch_size must be positive, got 0"):
    make(3, 0)
  with pytest.raises(ValueError, match="seq_len must be positive, got -2"):
    make(np.int64(-2), 1)
  # Tensors are only known at run time: not checked, as the original.
  assert make(tf.constant(0), tf.constant(2)).shape[:2] == (2, 0)
  assert make(3, 1).shape[:2] == (1, 3)
