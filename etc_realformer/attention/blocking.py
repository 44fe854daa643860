"""Layout changes between the three ways of storing local (l2l) attention.

ETC's long-to-long attention is a band: query i sees keys i-r .. i+r. Three
layouts of the same band appear in this project:

* window:  `[..., L, 2r+1]`, entry j of row i is key i - r + j. Side inputs
  (`l2l_att_mask`, `l2l_relative_att_ids`) and returned attention
  probabilities use it.
* blocked: `[..., nb, b, 3b]` with b = r + 1 and nb = ceil(L / b). Queries are
  cut into blocks of b; each block sees the previous, its own and the next
  block of keys (3b). Entry j of the window of in-block query q sits at
  column q + 1 + j. This is the "sparse" path: linear in L.
* full:    `[..., L, L]`, the "full" (dense) path.

All conversions below are pad-and-reshape "skews": they move data without
gathers, keep memory linear in the input, and are plain XLA-friendly ops.
"""

from typing import Optional, Union

import tensorflow as tf

Dim = Union[int, tf.Tensor]


def dim(x: tf.Tensor, axis: int) -> Dim:
  """Static size of `axis` if known, else the dynamic one."""
  static = x.shape[axis]
  return static if static is not None else tf.shape(x)[axis]


def dims(x: tf.Tensor) -> list:
  """Every axis's size, static where known."""
  return [dim(x, i) for i in range(x.shape.rank)]


def _leading_shape(x: tf.Tensor, num_trailing: int):
  """The shape of `x` without its last `num_trailing` axes, as a list."""
  return dims(x)[:x.shape.rank - num_trailing]


def merge_axes(x: tf.Tensor, axis: int) -> tf.Tensor:
  """Merges axes `axis` and `axis + 1` (a free reshape), e.g. blocks
  <T>[B, H, nb, b, K] -> [B, H, nb * b, K] with `axis` 2."""
  shape = dims(x)
  return tf.reshape(x, shape[:axis] + [shape[axis] * shape[axis + 1]] +
                    shape[axis + 2:])


def split_axis(x: tf.Tensor, axis: int, size: int) -> tf.Tensor:
  """Inverse of `merge_axes`: cuts `axis` into [n, size] (n * size = dim)."""
  shape = dims(x)
  return tf.reshape(x, shape[:axis] + [shape[axis] // size, size] +
                    shape[axis + 1:])


def slice_last(x: tf.Tensor, start: Dim, size: Dim, axis: int = -1
               ) -> tf.Tensor:
  """`x[..., start:start + size]` along `axis`, as a `tf.slice`.

  Written with `tf.slice` rather than Python slicing: the gradient of a
  StridedSlice (StridedSliceGrad) was among the slowest ops of the backward
  pass on CPU, while Slice's gradient is a plain Pad.
  """
  rank = x.shape.rank
  if axis < 0:
    axis += rank
  begin = [0] * rank
  begin[axis] = start
  sizes = [-1] * rank
  sizes[axis] = size
  out = tf.slice(x, begin, sizes)
  # A tensor-valued size hides every static dim; restore the others.
  dims = x.shape.as_list()
  dims[axis] = size if isinstance(size, int) else None
  out.set_shape(dims)
  return out


def skew_right(x: tf.Tensor, offset: int, width: int) -> tf.Tensor:
  """Shifts row q of the last two axes right by q + offset.

  Args:
    x: <T>[..., n, w].
    offset: non-negative shift of row 0.
    width: width of the result; must satisfy width + 2 - n >= offset + w so
      that nothing wraps around (checked when n is static).

  Returns:
    <T>[..., n, width] with out[..., q, q + offset + j] = x[..., q, j] and
    zeros elsewhere.
  """
  n = x.shape[-2]
  w = x.shape[-1]
  if w is None:
    raise ValueError("skew_right needs a static last dimension")
  if n is not None and width + 2 - n < offset + w:
    raise ValueError(f"skew_right: width {width} too small for {n} rows of "
                     f"{w} at offset {offset}")
  lead = _leading_shape(x, 2)
  n = dim(x, -2)
  # Rows of width + 1: flattening and re-cutting at `width` shifts row q by q.
  padded = tf.pad(x, [[0, 0]] * (x.shape.rank - 1) +
                  [[offset, width + 1 - offset - w]])
  flat = tf.reshape(padded, lead + [n * (width + 1)])
  flat = slice_last(flat, 0, n * width)
  return tf.reshape(flat, lead + [n, width])


def unskew_left(x: tf.Tensor, offset: int, width: int) -> tf.Tensor:
  """Inverse of `skew_right`: out[..., q, j] = x[..., q, q + offset + j].

  Args:
    x: <T>[..., n, t] with n - 1 + offset + width <= t.
    offset: non-negative column of row 0's first element.
    width: width of the result.

  Returns:
    <T>[..., n, width].
  """
  t = x.shape[-1]
  if t is None:
    raise ValueError("unskew_left needs a static last dimension")
  lead = _leading_shape(x, 2)
  n = dim(x, -2)
  flat = tf.reshape(x, lead + [n * t])
  # Re-cutting rows at t + 1 moves row q left by q.
  flat = tf.pad(flat, [[0, 0]] * len(lead) + [[0, n]])
  rows = tf.reshape(flat, lead + [n, t + 1])
  return slice_last(rows, offset, width)


def num_blocks(seq_len: Dim, block_len: int) -> Dim:
  return (seq_len + block_len - 1) // block_len


def split_into_blocks(x: tf.Tensor, block_len: int, axis: int = 1
                      ) -> tf.Tensor:
  """Pads `axis` to a multiple of `block_len` and splits it into blocks.

  Args:
    x: <T>[d0, ..., L, ...] with L at `axis`.
    block_len: positive block length b.
    axis: the axis to split (non-negative).

  Returns:
    <T>[d0, ..., nb, b, ...], zero padded at the end.
  """
  rank = x.shape.rank
  if axis < 0:
    axis += rank
  seq_len = dim(x, axis)
  nb = num_blocks(seq_len, block_len)
  pad = nb * block_len - seq_len
  paddings = [[0, 0]] * rank
  paddings[axis] = [0, pad]
  x = tf.pad(x, paddings)
  shape = dims(x)
  return tf.reshape(x, shape[:axis] + [nb, block_len] + shape[axis + 1:])


def padded_blocks(x: tf.Tensor, block_len: int, axis: int = 1) -> tf.Tensor:
  """Splits `axis` into blocks with one zero block added at each end.

  One pad (both edges and the tail at once): padding the tail and the edges
  apart costs one more copy of x, and a slice in the gradient.

  Args:
    x: <T>[..., L, ...] with L at `axis` (non-negative).
    block_len: positive block length b.

  Returns:
    <T>[..., nb + 2, b, ...]: block i + 1 holds positions [i b, (i + 1) b),
    zeros outside [0, L).
  """
  rank = x.shape.rank
  seq_len = dim(x, axis)
  nb = num_blocks(seq_len, block_len)
  paddings = [[0, 0]] * rank
  paddings[axis] = [block_len, nb * block_len - seq_len + block_len]
  padded = tf.pad(x, paddings)
  shape = dims(padded)
  return tf.reshape(padded, shape[:axis] + [nb + 2, block_len] +
                    shape[axis + 1:])


def band_from_padded(padded: tf.Tensor, start: Dim, size: Dim,
                     axis: int = 1) -> tf.Tensor:
  """The band keys of query blocks [start, start + size) from
  `padded_blocks` output: each block concatenated with its neighbours.

  Args:
    padded: <T>[..., nb + 2, b, ...] with the blocks at `axis`.
    start, size: the query blocks wanted.

  Returns:
    <T>[..., size, 3b, ...]: block i holds positions [(i - 1) b, (i + 2) b).
  """
  return tf.concat([slice_last(padded, start + k, size, axis)
                    for k in range(3)], axis=axis + 1)


def band_blocks(x: tf.Tensor, block_len: int, axis: int = 1) -> tf.Tensor:
  """The keys (or values) each block of queries sees on the sparse l2l band.

  Args:
    x: <T>[..., L, ...] with L at `axis` (non-negative).
    block_len: positive block length b.

  Returns:
    <T>[..., nb, 3b, ...]: block i holds positions [(i - 1) b, (i + 2) b),
    zeros outside [0, L).
  """
  padded = padded_blocks(x, block_len, axis)
  return band_from_padded(padded, 0, dim(padded, axis) - 2, axis)


def window_in_range_mask(seq_len: Dim, local_radius: int) -> tf.Tensor:
  """<bool>[L, 2r+1]: whether window entry j of query i is a real key."""
  positions = tf.range(seq_len)[:, tf.newaxis]
  offsets = tf.range(-local_radius, local_radius + 1)[tf.newaxis, :]
  keys = positions + offsets
  return tf.logical_and(keys >= 0, keys < seq_len)


def window_to_blocked(window: tf.Tensor, local_radius: int) -> tf.Tensor:
  """Moves window-layout values into the blocked layout.

  Args:
    window: <T>[B, ..., L, 2r+1] (the sequence axis is third from last).
    local_radius: r.

  Returns:
    <T>[B, ..., nb, b, 3b] with b = r + 1; entries outside the window (and the
    padded queries past L) are zero.
  """
  block_len = local_radius + 1
  rank = window.shape.rank
  blocked = split_into_blocks(window, block_len, axis=rank - 2)
  return skew_right(blocked, offset=1, width=3 * block_len)


def blocked_to_window(blocked: tf.Tensor, seq_len: Dim,
                      local_radius: int) -> tf.Tensor:
  """Inverse of `window_to_blocked`: <T>[B, ..., nb, b, 3b] ->
  [B, ..., L, 2r+1]."""
  window = unskew_left(blocked, offset=1, width=2 * local_radius + 1)
  lead = _leading_shape(window, 3)
  nb, b = dim(window, -3), dim(window, -2)
  window = tf.reshape(window, lead + [nb * b, 2 * local_radius + 1])
  return slice_last(window, 0, seq_len, axis=-2)


def window_to_full(window: tf.Tensor, local_radius: int) -> tf.Tensor:
  """Moves window-layout values into the dense layout.

  Args:
    window: <T>[..., L, 2r+1].
    local_radius: r.

  Returns:
    <T>[..., L, L] with out[i, k] = window[i, k - i + r] inside the band and
    zero outside.
  """
  seq_len = window.shape[-2]
  if seq_len is None:
    raise ValueError("window_to_full needs a static sequence length")
  wide = skew_right(window, offset=0, width=seq_len + 2 * local_radius)
  return slice_last(wide, local_radius, seq_len)


def full_to_window(full: tf.Tensor, local_radius: int) -> tf.Tensor:
  """Inverse of `window_to_full` on the band: <T>[..., L, L] ->
  [..., L, 2r+1]."""
  r = local_radius
  padded = tf.pad(full, [[0, 0]] * (full.shape.rank - 1) + [[r, r]])
  return unskew_left(padded, offset=0, width=2 * r + 1)


def pad_axis_to(x: tf.Tensor, axis: int, length: Dim,
                value: Optional[float] = 0) -> tf.Tensor:
  """Pads `axis` at the end up to `length`."""
  rank = x.shape.rank
  if axis < 0:
    axis += rank
  paddings = [[0, 0]] * rank
  paddings[axis] = [0, length - dim(x, axis)]
  return tf.pad(x, paddings, constant_values=value)
