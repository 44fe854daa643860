"""Clipped relative position ids (Shaw et al., arXiv 1803.02155) for ETC.

Id convention (`M` = `max_distance`), identical to the original ETC code:

  * 0: the key is the query token itself;
  * 1 .. M: the key is d = 1 .. M tokens to the right (d > M clips to M);
  * M + 1 .. 2M: the key is d = 1 .. M tokens to the left (clips to 2M).

That makes `2M + 1` distance ids (`distance_vocab_size`). ETC appends further
ids after them: `2M + 1` / `2M + 2` for l2g and g2l pairs (other sentence /
own sentence) and `2M + 3` for multi-hop g2g pairs in different paragraphs;
`other_sentence_id`, `own_sentence_id` and `cross_paragraph_id` name them.
"""

from typing import Optional, Union

import numpy as np
import tensorflow as tf

IntOrTensor = Union[int, tf.Tensor]


def _check_max_distance(max_distance: int) -> None:
  if not isinstance(max_distance, (int, np.integer)) or max_distance < 0:
    raise ValueError(
        f"relative_pos_max_distance must be a non-negative int, got "
        f"{max_distance!r}")


def _check_positive(value: IntOrTensor, name: str) -> None:
  """A Python int must be >= 1 (as the original ETC, which raises for an
  empty sequence or batch); a tensor is not checked (its value is known
  only at run time)."""
  if isinstance(value, (int, np.integer)) and value < 1:
    raise ValueError(f"{name} must be positive, got {value}")


def distance_vocab_size(max_distance: int) -> int:
  """Number of distance ids, `2 * max_distance + 1`."""
  _check_max_distance(max_distance)
  return 2 * max_distance + 1


def other_sentence_id(max_distance: int) -> int:
  """l2g/g2l id for a long token and a global token of another sentence."""
  return distance_vocab_size(max_distance)


def own_sentence_id(max_distance: int) -> int:
  """l2g/g2l id for a long token and the global token(s) it belongs to."""
  return distance_vocab_size(max_distance) + 1


def cross_paragraph_id(max_distance: int) -> int:
  """Multi-hop g2g id for two global tokens in different paragraphs."""
  return distance_vocab_size(max_distance) + 2


def relative_ids_from_offsets(offsets: tf.Tensor,
                              max_distance: int) -> tf.Tensor:
  """Maps signed key-minus-query offsets to relative position ids.

  Args:
    offsets: <int32>[...] key position minus query position.
    max_distance: `M`, the clipping distance (non-negative).

  Returns:
    <int32>[...] ids in [0, 2M]: `min(d, M)` for d >= 0 (key to the right),
    `M + min(-d, M)` for d < 0 (key to the left).
  """
  _check_max_distance(max_distance)
  offsets = tf.cast(offsets, tf.int32)
  clipped = tf.minimum(tf.abs(offsets), max_distance)
  # Left keys live in the upper half of the vocabulary.
  return tf.where(offsets < 0, clipped + max_distance, clipped)


def make_relative_id_pattern(window_size: int, max_distance: int) -> tf.Tensor:
  """Ids of a window centred on the query, e.g. one row of l2l ids.

  For `max_distance=3`, `window_size=11`:
  `[6, 6, 6, 5, 4, 0, 1, 2, 3, 3, 3]`.

  Args:
    window_size: Odd positive window length; position `window_size // 2` is
      the query itself.
    max_distance: `M`, the clipping distance.

  Returns:
    <int32>[window_size] constant tensor.
  """
  if not isinstance(window_size, (int, np.integer)) or window_size < 1:
    raise ValueError(f"window_size must be a positive int, got "
                     f"{window_size!r}")
  if window_size % 2 != 1:
    raise ValueError(f"window_size must be odd, got {window_size}")
  _check_max_distance(max_distance)
  # Computed in NumPy: the pattern is a compile-time constant (XLA-friendly).
  offsets = np.arange(window_size) - window_size // 2
  clipped = np.minimum(np.abs(offsets), max_distance)
  ids = np.where(offsets < 0, clipped + max_distance, clipped)
  return tf.constant(ids, dtype=tf.int32)


def make_local_relative_att_ids(seq_len: IntOrTensor,
                                local_radius: int,
                                max_distance: int,
                                batch_size: IntOrTensor = 1) -> tf.Tensor:
  """Relative ids for the l2l sliding window (same pattern on every row).

  As in the original ETC, the ids ignore the sequence edges: window slots
  that fall before position 0 or after position L-1 still carry their
  distance id, and only `l2l_att_mask` (0 there) keeps them out.

  Args:
    seq_len: `L`, the long length (int or scalar tensor).
    local_radius: `r` >= 1; window slot j is key position i - r + j.
    max_distance: `M`, the clipping distance.
    batch_size: `B` (int or scalar tensor).

  Returns:
    <int32>[B, L, 2r + 1] tensor.

  Raises:
    ValueError: `seq_len` or `batch_size` is an int below 1, or
      `local_radius` is not a positive int.
  """
  _check_positive(seq_len, "seq_len")
  if not isinstance(local_radius, (int, np.integer)) or local_radius < 1:
    raise ValueError(f"local_radius must be a positive int, got "
                     f"{local_radius!r}")
  _check_positive(batch_size, "batch_size")
  pattern = make_relative_id_pattern(2 * local_radius + 1, max_distance)
  return tf.tile(pattern[tf.newaxis, tf.newaxis, :], [batch_size, seq_len, 1])


def make_relative_att_ids(seq_len: IntOrTensor,
                          max_distance: int,
                          batch_size: IntOrTensor = 1) -> tf.Tensor:
  """Relative ids for full self-attention (e.g. g2g).

  For `max_distance=3`, `seq_len=6`, row 2 is `[5, 4, 0, 1, 2, 3]`.

  Args:
    seq_len: `G` (int or scalar tensor).
    max_distance: `M`, the clipping distance.
    batch_size: `B` (int or scalar tensor).

  Returns:
    <int32>[B, G, G] tensor; `[b, q, k]` is the id of key k for query q.

  Raises:
    ValueError: `seq_len` or `batch_size` is an int below 1.
  """
  _check_positive(seq_len, "seq_len")
  _check_positive(batch_size, "batch_size")
  positions = tf.range(seq_len, dtype=tf.int32)
  ids = relative_ids_from_offsets(
      positions[tf.newaxis, :] - positions[:, tf.newaxis], max_distance)
  return tf.tile(ids[tf.newaxis], [batch_size, 1, 1])


def overwrite_relative_att_ids_outside_segments(
    relative_att_ids: tf.Tensor,
    segment_ids: tf.Tensor,
    overwrite_value: int,
    key_segment_ids: Optional[tf.Tensor] = None) -> tf.Tensor:
  """Replaces the ids of query/key pairs in different segments by one value.

  Args:
    relative_att_ids: <int32>[B, Q, K] ids.
    segment_ids: <int>[B, Q] segment of every query (and of every key when
      `key_segment_ids` is None, so then Q == K).
    overwrite_value: The id for pairs whose segments differ.
    key_segment_ids: Optional <int>[B, K] segments of the keys.

  Returns:
    <int32>[B, Q, K] ids.
  """
  segment_ids = tf.cast(segment_ids, tf.int32)
  if key_segment_ids is None:
    key_segment_ids = segment_ids
  key_segment_ids = tf.cast(key_segment_ids, tf.int32)
  same = tf.equal(segment_ids[:, :, tf.newaxis],
                  key_segment_ids[:, tf.newaxis, :])
  return tf.where(same, tf.cast(relative_att_ids, tf.int32),
                  tf.constant(overwrite_value, tf.int32))
