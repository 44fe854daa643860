"""Seeded (stateless) dropout.

Gradient checkpointing recomputes a chunk of layers in the backward pass; a
stateful dropout would draw new masks there and the gradients would belong to
a different function. Every dropout site in the encoder therefore draws its
mask from `tf.random.stateless_*` with a seed made of one per-call seed (drawn
once, outside any recomputed region) folded with the site's fixed number. The
same call thus always sees the same masks, recomputed or not.

Keras' own `Dropout` has no way to take a seed tensor per call, and
`tf.nn.experimental.stateless_dropout` draws one random number per
element. Two generators make the masks here (`ExecutionConfig.dropout_rng`):

* 'philox': `tf.random.stateless_uniform` bits, two 16-bit decisions per
  draw (see `_keep_mask`). The random op is a separate kernel: under XLA it
  writes its bits to memory and the softmax reads them back.
* 'hash': a keyed integer hash of an index (`hash_bits`), elementwise
  arithmetic on iotas that XLA fuses into the op that applies the mask, so
  no mask or bits reach memory (the GPU path; on the CPU graph path each
  step of the hash is a kernel of its own, slower than Philox). Like
  Philox, each 32-bit hash makes two 16-bit decisions: those of two
  neighbouring columns (`hash_pairs`), which the fused kernels hash once
  for both.

Both keep an element with the same probability and give a piece of a
tensor the bits of the whole (chunks), but they draw different masks.
"""

from typing import List, Optional, Tuple, Union

import numpy as np
import tensorflow as tf

Dim = Union[int, tf.Tensor]

PHILOX = "philox"
HASH = "hash"
DROPOUT_RNGS = (PHILOX, HASH)

# ---------------------------------------------------------------- the sites
# Every dropout site of the encoder has a fixed number, folded into the
# call's seed. Changing a number changes the masks a seed draws.
#
#   0, 1                       embeddings: long, global
#   (i + 1) * SITES_PER_LAYER  layer i's block, + the offsets below:
#     + 0 .. 3                 attention probabilities: l2l, l2g, g2g, g2l
#     + 4, 5                   attention output: long, global
#     + 6, 7                   feed-forward output: long, global
SITE_EMBEDDING_LONG = 0
SITE_EMBEDDING_GLOBAL = 1
SITES_PER_LAYER = 16
ATTENTION_PROBS_OFFSET = {"l2l": 0, "l2g": 1, "g2g": 2, "g2l": 3}
ATTENTION_OUTPUT_LONG_OFFSET = 4
ATTENTION_OUTPUT_GLOBAL_OFFSET = 5
FEED_FORWARD_LONG_OFFSET = 6
FEED_FORWARD_GLOBAL_OFFSET = 7


def layer_sites(index: int) -> int:
  """The first dropout site of layer `index` (see the table above)."""
  return (index + 1) * SITES_PER_LAYER


def fold_seed(seed: tf.Tensor, site: int) -> tf.Tensor:
  """A new <int32>[2] seed for dropout site `site`, derived from `seed`."""
  return tf.random.experimental.stateless_fold_in(seed, site)


def keep_gain(rate: float, training: bool = True) -> float:
  """The factor inverted dropout multiplies kept values by: 1 / P(keep).

  P(keep) is 1 - `rate` rounded to 1/65536, the resolution of the mask; 1.0
  when dropout does not apply (`training` False or `rate` 0).
  """
  if not training or rate == 0.0:
    return 1.0
  return 1.0 / (1.0 - keep_threshold(rate) / 65536.0)


def stateless_dropout(x: tf.Tensor, rate: float, seed: Optional[tf.Tensor],
                      site: int, training: bool,
                      prescaled: bool = False, rng: str = PHILOX
                      ) -> tf.Tensor:
  """Inverted dropout with a mask fixed by (`seed`, `site`).

  Args:
    x: any float tensor.
    rate: drop probability in [0, 1).
    seed: <int32>[2] per-call seed, or None when not training.
    site: a number unique to this dropout site within the model.
    training: dropout applies only when True.
    prescaled: `x` already carries the `keep_gain(rate)` factor (folded into
      an earlier multiply by the caller), so only the mask is applied.
    rng: 'philox' or 'hash' (see the module docstring).

  Returns:
    A tensor like `x`.
  """
  if not _applies(rate, seed, training):
    return x
  if rng == PHILOX:
    keep = _keep_mask(tf.shape(x), rate, fold_seed(seed, site))
  else:
    # Row-major over the whole tensor: rows first along axis 0 (and an
    # unknown `rng` is refused there).
    keep = row_keep_mask(seed, site, rate, 0, tf.shape(x), 0, rng)
  return _apply(x, keep, rate, prescaled)


def _applies(rate: float, seed: Optional[tf.Tensor], training: bool) -> bool:
  """Whether dropout changes anything (and then it needs a seed)."""
  if not training or rate == 0.0:
    return False
  if seed is None:
    raise ValueError("dropout needs a seed when training")
  return True


def _apply(x: tf.Tensor, keep: tf.Tensor, rate: float,
           prescaled: bool) -> tf.Tensor:
  """Zeroes `x` where not `keep`; scales the rest unless `prescaled`."""
  if not prescaled:
    x = x * tf.cast(keep_gain(rate), x.dtype)
  return tf.where(keep, x, tf.zeros_like(x))


def keep_threshold(rate: float) -> int:
  """Dropout keeps an element iff its 16-bit random number is >= this."""
  return int(round(rate * 65536))


# ------------------------------------------------- dimensions of a mask
# A mask's shape is known when traced in most calls. Its counter, slice and
# index are then built from Python ints and a few small constants where the
# dynamic form spends a slice, cast and multiply an axis: the masks are a
# large part of an attention layer's traced ops, and every op costs tracing
# and compile time. Both forms give the same bits.
_WORD = 2**32  # the hash index's arithmetic wraps to 32 bits


def _dims(shape: tf.Tensor) -> List[Dim]:
  """`shape`'s entries: Python ints where the whole shape is known when
  traced, else scalar tensors.

  All or nothing (`tf.get_static_value` sees no partly known shape): the
  masks apply in training, whose batches have a static size
  (`drop_remainder`), and the encoder's lengths are static.
  """
  static = tf.get_static_value(shape)
  if static is not None:
    return [int(d) for d in static]
  return [shape[i] for i in range(int(shape.shape[0]))]


def _times(a: Dim, b: Dim) -> Dim:
  """a * b modulo 2**32: a Python int when both are, else <uint32>[]."""
  if isinstance(a, int) and isinstance(b, int):
    return a * b % _WORD
  return tf.cast(a, tf.uint32) * tf.cast(b, tf.uint32)


def _int64_times(a: Dim, b: Dim) -> Dim:
  """a * b: a Python int when both are, else <int64>[]."""
  if isinstance(a, int) and isinstance(b, int):
    return a * b
  return tf.cast(a, tf.int64) * tf.cast(b, tf.int64)


def _uint32(value: Dim) -> tf.Tensor:
  """`value` as <uint32>[] (modulo 2**32)."""
  if isinstance(value, int):
    return tf.constant(value % _WORD, tf.uint32)
  return tf.cast(value, tf.uint32)


def _axis_iota(size: Dim, stride: Dim, axis: int, rank: int) -> tf.Tensor:
  """<uint32>: iota(size) * stride along `axis` of a rank-`rank` shape of
  ones (modulo 2**32)."""
  shape = [-1 if j == axis else 1 for j in range(rank)]
  if isinstance(size, int) and isinstance(stride, int):
    values = np.arange(size, dtype=np.uint64) * np.uint64(stride) % _WORD
    return tf.constant(values.astype(np.uint32).reshape(shape))
  iota = tf.cast(tf.range(size), tf.uint32) * tf.cast(stride, tf.uint32)
  return tf.reshape(iota, shape)


def _product(dims: List[Dim]) -> Dim:
  """The product of `dims`: a Python int when all are, else <int64>[]."""
  if all(isinstance(d, int) for d in dims):
    return int(np.prod(dims, dtype=np.int64))
  return tf.reduce_prod(tf.stack([tf.cast(d, tf.int64) for d in dims]))


def _shape_of(sizes: List[Dim]) -> Union[List[int], tf.Tensor]:
  """`sizes` as a shape argument: a list when static, else a tensor."""
  if all(isinstance(d, int) for d in sizes):
    return sizes
  return tf.stack([tf.cast(d, tf.int32) for d in sizes])


# Philox (`tf.random.Algorithm.PHILOX`); each 128-bit block holds eight of
# the 16-bit numbers.
_PHILOX = 1
_HALVES_PER_BLOCK = 8


def mask_halves(folded: tf.Tensor, start: Dim, count: Dim) -> tf.Tensor:
  """<uint16>[count]: the 16-bit numbers [start, start + count) of the
  Philox stream keyed by `folded` (a `fold_seed` result), counter from 0.

  Number e is half e % 2 (low first) of 32-bit word e // 2, the order of
  `tf.bitcast(uint32 -> uint16)`. A piece of the stream is drawn alone by
  starting the counter at its block (`tf.random.stateless_uniform` has no
  offset), so a chunked computation sees exactly the numbers of the whole
  one. `start` and `count` as Python ints (static shapes) make the counter
  and the slice constants.
  """
  key = tf.reshape(tf.bitcast(tf.bitcast(folded, tf.int64), tf.uint64), [1])
  if isinstance(start, int) and isinstance(count, int):
    step, skip = divmod(start, _HALVES_PER_BLOCK)
    counter = tf.constant([step, 0], tf.uint64)
    num_words = tf.constant([(skip + count + 1) // 2])
    begin, size = [skip], [count]
  else:
    start = tf.cast(start, tf.int64)
    count = tf.cast(count, tf.int64)
    step = start // _HALVES_PER_BLOCK
    skip = start - step * _HALVES_PER_BLOCK
    counter = tf.bitcast(tf.stack([step, tf.constant(0, tf.int64)]),
                         tf.uint64)
    num_words = tf.reshape((skip + count + 1) // 2, [1])
    begin, size = tf.reshape(skip, [1]), tf.reshape(count, [1])
  bits = tf.raw_ops.StatelessRandomUniformFullIntV2(
      shape=num_words, key=key, counter=counter, alg=_PHILOX,
      dtype=tf.uint32)
  halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])
  return tf.slice(halves, begin, size)


def _keep_mask(shape: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
  """<bool>[shape]: True with probability 1 - rate (to 1/65536).

  Each 32-bit Philox draw is split into two 16-bit numbers: on CPU the random
  draws were the largest cost of attention dropout (tens of millions of
  elements per layer), and this halves them. Keras' and TF's dropouts spend
  one 32-bit draw per element.
  """
  sizes = _dims(shape)
  halves = mask_halves(seed, 0, _product(sizes))
  keep = halves >= tf.constant(keep_threshold(rate), tf.uint16)
  return tf.reshape(keep, _shape_of(sizes))


def row_dropout(probs: tf.Tensor, rate: float, seed: Optional[tf.Tensor],
                site: int, training: bool, row_start: Dim = 0,
                row_axis: int = 2, prescaled: bool = False,
                rng: str = PHILOX, band_block_len: int = 0) -> tf.Tensor:
  """Dropout whose mask is cut along `row_axis` (attention probabilities).

  The mask of the rows [row_start, row_start + n) is the same whether the
  tensor is computed whole or in chunks of rows (blocks of long queries,
  global queries): the whole mask is one Philox stream laid out rows first,
  [rows, *other axes], and a piece is drawn alone by starting the counter at
  its offset (`tf.random.stateless_uniform` has no offset). Same keep
  probability and scaling as `stateless_dropout`.

  Args:
    probs: <float>[..., n, ...] with the n rows at `row_axis`.
    rate, seed, site, training, prescaled, rng: as `stateless_dropout`.
    row_start: the index of this tensor's first row in the whole tensor.
    row_axis: the row axis (non-negative).
    band_block_len: b when the last axis is the l2l band (rng='hash':
      `hash_pairs`).

  Returns:
    A tensor like `probs`.
  """
  if not _applies(rate, seed, training):
    return probs
  return _apply(probs, row_keep_mask(seed, site, rate, row_start,
                                     tf.shape(probs), row_axis, rng,
                                     band_block_len),
                rate, prescaled)


def row_keep_mask(seed: tf.Tensor, site: int, rate: float, row_start: Dim,
                  shape: tf.Tensor, row_axis: int = 2,
                  rng: str = PHILOX, band_block_len: int = 0) -> tf.Tensor:
  """<bool>[shape]: rows [row_start, row_start + shape[row_axis]) of one
  seeded keep mask laid out rows first (see `row_dropout`).

  band_block_len: with rng='hash', b > 0 when the last axis is the l2l
  band of row blocks (`hash_pairs`).
  """
  if rng == HASH:
    key = _hash_key(fold_seed(seed, site))
    # The key's first word starts the index's sum: a partial sum that held
    # only static shapes would be folded into a constant of the graph (tens
    # of MB in the module), where XLA should see iotas.
    index, low = hash_pairs(shape, row_axis, row_start, offset=key[0],
                            band_block_len=band_block_len)
    bits = _keyed_hash(index, key[1])
    # 16 bits against the threshold: the keep probability of the Philox
    # masks, exactly.
    half = tf.where(low, tf.bitwise.bitwise_and(bits, 0xFFFF),
                    tf.bitwise.right_shift(bits, tf.constant(16, tf.uint32)))
    return half >= tf.constant(keep_threshold(rate), tf.uint32)
  if rng != PHILOX:
    raise ValueError(f"dropout rng {rng!r} is not one of {DROPOUT_RNGS}")
  sizes = _dims(shape)
  rank = len(sizes)
  rest = [i for i in range(rank) if i != row_axis]
  num_rows = sizes[row_axis]
  per_row = _product([sizes[i] for i in rest])
  halves = mask_halves(fold_seed(seed, site), _int64_times(row_start, per_row),
                       _int64_times(num_rows, per_row))
  keep = halves >= tf.constant(keep_threshold(rate), tf.uint16)
  keep = tf.reshape(keep, _shape_of([num_rows] + [sizes[i] for i in rest]))
  # [n, *rest] -> the layout of the tensor.
  perm = list(range(1, row_axis + 1)) + [0] + list(range(row_axis + 1, rank))
  return tf.transpose(keep, perm)


# ------------------------------------------------------------- hash masks
def row_major_index(shape: Union[tf.Tensor, List[Dim]], row_axis: int,
                    row_start: Dim, offset: Union[int, tf.Tensor] = 0,
                    columns: bool = True) -> tf.Tensor:
  """<uint32>[shape]: each element's index in the rows-first layout of the
  whole tensor (rows [row_start, ...) along `row_axis`, then the other axes
  in order), plus `offset`, modulo 2**32. Without `columns`, the last axis
  is left out of the sum (and is 1 in the result's shape).

  Built by broadcasting one iota per axis in the tensor's own layout, so
  under XLA it is elementwise work that fuses into its consumer (no
  transpose, no buffer).
  """
  sizes = list(shape) if isinstance(shape, list) else _dims(shape)
  rank = len(sizes)
  rest = [i for i in range(rank) if i != row_axis]
  strides = {}
  stride = 1
  for i in reversed(rest):
    strides[i] = stride
    stride = _times(stride, sizes[i])
  strides[row_axis] = stride  # elements per row
  # offset + row_start * per_row, wrapped to 32 bits like the rest. The
  # offset comes first: with a tensor offset (the key's word) no partial
  # sum holds only constants, which TensorFlow would fold into a constant
  # of the mask's size.
  index = _uint32(offset) + _uint32(_times(row_start, stride))
  for i in range(rank if columns else rank - 1):
    index = index + _axis_iota(sizes[i], strides[i], i, rank)
  return index


def hash_pairs(shape: tf.Tensor, row_axis: int, row_start: Dim,
               offset: Union[int, tf.Tensor] = 0, band_block_len: int = 0
               ) -> Tuple[tf.Tensor, tf.Tensor]:
  """(<uint32>[shape] index, <bool> low, broadcastable to shape): what the
  hash dropout hashes for each element, and which half of the hash
  decides it.

  Two neighbouring columns of the last axis share one hash: the high 16
  bits decide the even column, the low 16 the odd one. The index is the
  pair's position in the rows-first layout (`row_major_index`) of the
  tensor whose last axis holds the W // 2 + 1 pairs of its W columns, plus
  `offset`. On the l2l band (`band_block_len` b > 0, the rows being row
  blocks), columns pair by key: row block k's column c is key k * b + c,
  so its pairs start one column late when k * b is odd. That is the pairing
  of a kernel's tile over keys, whatever block its rows are in; and the
  fused kernels make one hash per pair where elementwise work makes two.
  A last axis that is the row axis (rank 1) is one column a row.
  """
  sizes = _dims(shape)
  rank = len(sizes)
  if row_axis == rank - 1:
    index, low = hash_pairs(tf.concat([shape, [1]], 0), row_axis, row_start,
                            offset)
    return index[..., 0], low[..., 0]
  width = sizes[-1]
  # Every axis but the columns, at its stride in the pairs' layout.
  rows_part = row_major_index(sizes[:-1] + [width // 2 + 1], row_axis,
                              row_start, offset, columns=False)
  column = _axis_iota(width, 1, rank - 1, rank)
  if band_block_len % 2:  # an even b starts every block's keys even
    blocks = (tf.cast(row_start, tf.uint32) +
              _axis_iota(sizes[row_axis], 1, row_axis, rank))
    column = column + tf.bitwise.bitwise_and(blocks, 1)
  one = tf.constant(1, tf.uint32)
  index = rows_part + tf.bitwise.right_shift(column, one)
  # Left to broadcast: a mask-sized `low` would hold only static shapes,
  # and TensorFlow would fold it into a constant of that size.
  return index, tf.equal(tf.bitwise.bitwise_and(column, one), one)


def _mix32(x: tf.Tensor) -> tf.Tensor:
  """A bijective 32-bit finaliser with low bias (C. Wellons' `lowbias32`:
  xorshift-multiply rounds, every input bit reaching every output bit)."""
  shift = lambda v, n: tf.bitwise.right_shift(v, tf.constant(n, tf.uint32))
  x = tf.bitwise.bitwise_xor(x, shift(x, 16))
  x = x * tf.constant(0x21F0AAAD, tf.uint32)
  x = tf.bitwise.bitwise_xor(x, shift(x, 15))
  x = x * tf.constant(0xD35A2D97, tf.uint32)
  return tf.bitwise.bitwise_xor(x, shift(x, 15))


def hash_bits(folded: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
  """<uint32>[index.shape]: 32 keyed pseudo-random bits per element index.

  Two rounds of `_mix32` keyed by the <int32>[2] `fold_seed` result:
  mix(mix(index + k0) ^ k1). Not a cryptographic generator; its outputs
  pass the tests' rate, independence and neighbour-correlation checks,
  which is what a dropout mask needs.
  """
  key = _hash_key(folded)
  return _keyed_hash(index + key[0], key[1])


def _hash_key(folded: tf.Tensor) -> tf.Tensor:
  return tf.bitcast(tf.cast(folded, tf.int32), tf.uint32)


def _keyed_hash(index_plus_k0: tf.Tensor, k1: tf.Tensor) -> tf.Tensor:
  return _mix32(tf.bitwise.bitwise_xor(_mix32(index_plus_k0), k1))


def new_call_seed() -> tf.Tensor:
  """Draws a fresh <int32>[2] seed for one forward call."""
  return tf.random.uniform([2], minval=0, maxval=2**31 - 1, dtype=tf.int32)
