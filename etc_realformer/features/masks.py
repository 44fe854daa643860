"""Attention masks for ETC: segmented full masks and sliding-window masks.

All masks are int32 with 1 = may attend, 0 = may not. The sliding-window
("local") layout is `[B, L, 2r + 1]`: slot j of row i is key position
i - r + j; slots outside [0, L) are always 0.
"""

import numpy as np
import tensorflow as tf


def example_ids_from_breakpoints(breakpoints: tf.Tensor) -> tf.Tensor:
  """Example ids from end-of-example breakpoints (reverse cumulative sum).

  A 1 marks the last token of each packed example, so the first example gets
  the largest id and padding after the last breakpoint gets 0.
  `[0, 1, 0, 0, 1, 0]` -> `[2, 2, 1, 1, 1, 0]`.

  Args:
    breakpoints: <int>[..., L] zeros and ones.

  Returns:
    <int32>[..., L] example ids.
  """
  return tf.cumsum(tf.cast(breakpoints, tf.int32), axis=-1, reverse=True)


def input_mask_from_breakpoints(breakpoints: tf.Tensor) -> tf.Tensor:
  """BERT-style input mask: 1 up to and including the last breakpoint."""
  return tf.minimum(example_ids_from_breakpoints(breakpoints), 1)


def breakpoints_from_input_mask(input_mask: tf.Tensor) -> tf.Tensor:
  """A 1 at every real token followed by padding (or by the end).

  For a prefix mask `[1, 1, 1, 0, 0]` this is `[0, 0, 1, 0, 0]`.

  Args:
    input_mask: <int>[..., L] zeros and ones.

  Returns:
    <int32>[..., L] breakpoints.
  """
  input_mask = tf.minimum(tf.cast(input_mask, tf.int32), 1)
  next_mask = tf.concat(
      [input_mask[..., 1:], tf.zeros_like(input_mask[..., :1])], axis=-1)
  return input_mask * (1 - next_mask)


def make_segmented_att_mask(segment_ids: tf.Tensor) -> tf.Tensor:
  """Full self-attention mask within segments (tokens need not be adjacent).

  Args:
    segment_ids: <int>[B, L] segment id of every token.

  Returns:
    <int32>[B, L, L]; `[b, q, k]` is 1 iff tokens q and k share a segment.
  """
  segment_ids = tf.convert_to_tensor(segment_ids)
  if segment_ids.shape.rank != 2:
    raise ValueError(f"segment_ids must have rank 2 [batch, length], got "
                     f"shape {segment_ids.shape}")
  return tf.cast(
      tf.equal(segment_ids[:, :, tf.newaxis], segment_ids[:, tf.newaxis, :]),
      tf.int32)


def make_cross_segmented_att_mask(query_segment_ids: tf.Tensor,
                                  key_segment_ids: tf.Tensor) -> tf.Tensor:
  """Mask between two sequences: 1 iff query and key share a segment.

  Args:
    query_segment_ids: <int>[B, Q].
    key_segment_ids: <int>[B, K].

  Returns:
    <int32>[B, Q, K].
  """
  return tf.cast(
      tf.equal(
          tf.cast(query_segment_ids, tf.int32)[:, :, tf.newaxis],
          tf.cast(key_segment_ids, tf.int32)[:, tf.newaxis, :]), tf.int32)


def local_window_positions(seq_len, local_radius: int):
  """Key positions of the sliding window and whether they are in range.

  Args:
    seq_len: `L` (int or scalar tensor).
    local_radius: `r`.

  Returns:
    positions: <int32>[L, 2r + 1], `i - r + j`.
    in_range: <bool>[L, 2r + 1], `0 <= i - r + j < L`.
  """
  window = tf.range(2 * local_radius + 1, dtype=tf.int32) - local_radius
  positions = tf.range(seq_len, dtype=tf.int32)[:, tf.newaxis] + window
  in_range = tf.logical_and(positions >= 0, positions < seq_len)
  return positions, in_range


def gather_local_windows(values: tf.Tensor, local_radius: int) -> tf.Tensor:
  """Each token's window of neighbours' values, zero outside the sequence.

  Args:
    values: <T>[B, L].
    local_radius: `r` >= 1.

  Returns:
    <T>[B, L, 2r + 1]; `[b, i, j]` = `values[b, i - r + j]` (0 out of range).
  """
  values = tf.convert_to_tensor(values)
  seq_len = tf.shape(values)[1]
  positions, in_range = local_window_positions(seq_len, local_radius)
  # Clamp so the gather stays in bounds; out-of-range slots are zeroed below.
  safe = tf.clip_by_value(positions, 0, tf.maximum(seq_len - 1, 0))
  windows = tf.gather(values, safe, axis=1)
  return tf.where(in_range[tf.newaxis], windows, tf.zeros_like(windows))


def make_local_segmented_att_mask(segment_ids: tf.Tensor,
                                  local_radius: int) -> tf.Tensor:
  """Sliding-window mask that also stops at segment boundaries.

  Same result as the original ETC `make_local_segmented_att_mask` (for
  non-negative ids; here negative ids work as well).

  Args:
    segment_ids: <int>[B, L] segment id of every token; tokens of one segment
      need not be adjacent.
    local_radius: `r` >= 1.

  Returns:
    <int32>[B, L, 2r + 1]; `[b, i, j]` is 1 iff key position k = i - r + j
    is in [0, L) and `segment_ids[b, k] == segment_ids[b, i]`.
  """
  segment_ids = tf.convert_to_tensor(segment_ids)
  if segment_ids.shape.rank != 2:
    raise ValueError(f"segment_ids must have rank 2 [batch, length], got "
                     f"shape {segment_ids.shape}")
  if not isinstance(local_radius, (int, np.integer)) or local_radius < 1:
    raise ValueError(f"local_radius must be a positive int, got "
                     f"{local_radius!r}")
  segment_ids = tf.cast(segment_ids, tf.int32)
  seq_len = tf.shape(segment_ids)[1]
  positions, in_range = local_window_positions(seq_len, local_radius)
  safe = tf.clip_by_value(positions, 0, tf.maximum(seq_len - 1, 0))
  windows = tf.gather(segment_ids, safe, axis=1)
  same = tf.equal(windows, segment_ids[:, :, tf.newaxis])
  mask = tf.cast(tf.logical_and(same, in_range[tf.newaxis]), tf.int32)
  # Keep the static shape when it is known (gather with dynamic L loses it).
  mask.set_shape(segment_ids.shape.concatenate([2 * local_radius + 1]))
  return mask


def make_local_att_mask_from_breakpoints(breakpoints: tf.Tensor,
                                         local_radius: int) -> tf.Tensor:
  """Sliding-window mask that does not cross end-of-segment breakpoints.

  Args:
    breakpoints: <int>[B, L], 1 at the last token of each segment.
    local_radius: `r` >= 1.

  Returns:
    <int32>[B, L, 2r + 1].
  """
  return make_local_segmented_att_mask(
      example_ids_from_breakpoints(breakpoints), local_radius)
