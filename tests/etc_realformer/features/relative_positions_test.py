"""Tests for the relative position ids and the mask helpers."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.features import masks
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


def test_breakpoint_helpers():
  np.testing.assert_array_equal(
      masks.example_ids_from_breakpoints([[0, 1, 0, 0, 1, 0]]),
      [[2, 2, 1, 1, 1, 0]])
  np.testing.assert_array_equal(
      masks.input_mask_from_breakpoints([[0, 1, 0, 0, 1, 0]]),
      [[1, 1, 1, 1, 1, 0]])
  np.testing.assert_array_equal(
      masks.breakpoints_from_input_mask([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]),
      [[0, 0, 1, 0, 0], [0, 0, 0, 0, 1]])


def test_local_segmented_mask_non_adjacent_segments():
  # Segments 4, 4, 9, 4 with r = 1: token 3 sees no neighbour, token 0 and 1
  # see each other; negative ids work too.
  out = masks.make_local_segmented_att_mask([[4, 4, 9, 4], [-1, -1, 0, 0]], 1)
  np.testing.assert_array_equal(out, [
      [[0, 1, 1], [1, 1, 0], [0, 1, 0], [0, 1, 0]],
      [[0, 1, 1], [1, 1, 0], [0, 1, 1], [1, 1, 0]],
  ])


def test_local_segmented_mask_matches_brute_force():
  rng = np.random.RandomState(0)
  segment_ids = rng.randint(0, 3, size=(3, 17))
  for radius in (1, 2, 5, 20):
    out = masks.make_local_segmented_att_mask(segment_ids, radius).numpy()
    expected = np.zeros((3, 17, 2 * radius + 1), np.int32)
    for b in range(3):
      for i in range(17):
        for j in range(2 * radius + 1):
          k = i - radius + j
          if 0 <= k < 17 and segment_ids[b, k] == segment_ids[b, i]:
            expected[b, i, j] = 1
    np.testing.assert_array_equal(out, expected)


def test_gather_local_windows():
  out = masks.gather_local_windows(tf.constant([[5, 6, 7]]), 1)
  np.testing.assert_array_equal(out, [[[0, 5, 6], [5, 6, 7], [6, 7, 0]]])


def test_segmented_mask_rank_error():
  with pytest.raises(ValueError, match="segment_ids"):
    masks.make_segmented_att_mask([1, 2, 3])
  with pytest.raises(ValueError, match="local_radius"):
    masks.make_local_segmented_att_mask([[1, 2, 3]], 0)
