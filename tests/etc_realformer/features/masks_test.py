"""The mask building blocks (`etc_realformer/features/masks.py`): breakpoint
conversions, segmented full masks and sliding-window masks."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.features import masks


def _local_reference(segment_ids, radius):
  """[B, L, 2r + 1]: key i - r + j in range and in query i's segment."""
  batch, length = segment_ids.shape
  expected = np.zeros((batch, length, 2 * radius + 1), np.int32)
  for b in range(batch):
    for i in range(length):
      for j in range(2 * radius + 1):
        k = i - radius + j
        if 0 <= k < length and segment_ids[b, k] == segment_ids[b, i]:
          expected[b, i, j] = 1
  return expected


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


def test_breakpoints_and_input_mask_round_trip():
  # Any prefix mask (including all padding) survives the round trip; bool
  # and int64 inputs give int32.
  prefix = np.array([[1] * n + [0] * (6 - n) for n in range(7)])
  breakpoints = masks.breakpoints_from_input_mask(prefix.astype(bool))
  assert breakpoints.dtype == tf.int32
  assert breakpoints.numpy().sum(-1).tolist() == [0] + [1] * 6
  back = masks.input_mask_from_breakpoints(tf.cast(breakpoints, tf.int64))
  assert back.dtype == tf.int32
  np.testing.assert_array_equal(back, prefix)


def test_segmented_att_mask_matches_numpy():
  segment_ids = np.array([[3, 3, 7, 3], [0, 1, 1, 2]])
  out = masks.make_segmented_att_mask(segment_ids)
  assert out.dtype == tf.int32 and out.shape == (2, 4, 4)
  np.testing.assert_array_equal(
      out, segment_ids[:, :, None] == segment_ids[:, None, :])


def test_cross_segmented_att_mask_matches_numpy():
  queries = np.array([[1, 2, 0]], np.int64)
  keys = np.array([[2, 2, 1, 5, 0]], np.int32)
  out = masks.make_cross_segmented_att_mask(queries, keys)
  assert out.dtype == tf.int32 and out.shape == (1, 3, 5)
  np.testing.assert_array_equal(out, queries[:, :, None] == keys[:, None, :])


def test_local_window_positions():
  positions, in_range = masks.local_window_positions(4, 1)
  np.testing.assert_array_equal(
      positions, [[-1, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]])
  np.testing.assert_array_equal(in_range, (positions.numpy() >= 0) &
                                (positions.numpy() < 4))


def test_gather_local_windows():
  out = masks.gather_local_windows(tf.constant([[5, 6, 7]]), 1)
  np.testing.assert_array_equal(out, [[[0, 5, 6], [5, 6, 7], [6, 7, 0]]])


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
    np.testing.assert_array_equal(out, _local_reference(segment_ids, radius))


def test_local_segmented_mask_keeps_static_shape_in_a_graph():
  # Under a dynamic length the gather loses the shape; the window axis is
  # set back from r.
  @tf.function(input_signature=[tf.TensorSpec([2, None], tf.int32)])
  def fn(segment_ids):
    out = masks.make_local_segmented_att_mask(segment_ids, 2)
    assert out.shape.as_list() == [2, None, 5]
    return out

  segment_ids = np.array([[0, 0, 1, 1, 1, 2], [5, 5, 5, 5, 5, 5]])
  np.testing.assert_array_equal(fn(tf.constant(segment_ids, tf.int32)),
                                _local_reference(segment_ids, 2))


def test_local_mask_from_breakpoints_stops_at_example_ends():
  breakpoints = np.array([[0, 1, 0, 0, 1, 0, 0]])
  out = masks.make_local_att_mask_from_breakpoints(breakpoints, 2)
  # Examples are tokens 0-1, 2-4, and padding 5-6 (its own segment).
  np.testing.assert_array_equal(
      out, _local_reference(np.array([[2, 2, 1, 1, 1, 0, 0]]), 2))


def test_segmented_mask_rank_error():
  with pytest.raises(ValueError, match="segment_ids"):
    masks.make_segmented_att_mask([1, 2, 3])
  with pytest.raises(ValueError, match="segment_ids"):
    masks.make_local_segmented_att_mask([1, 2, 3], 1)


@pytest.mark.parametrize("radius", [0, -1, 1.0, "2"])
def test_local_radius_must_be_a_positive_int(radius):
  with pytest.raises(ValueError, match="local_radius"):
    masks.make_local_segmented_att_mask([[1, 2, 3]], radius)
