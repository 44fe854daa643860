"""Seeded (stateless) dropout.

Gradient checkpointing recomputes a chunk of layers in the backward pass; a
stateful dropout would draw new masks there and the gradients would belong to
a different function. Every dropout site in the encoder therefore draws its
mask from `tf.random.stateless_*` with a seed made of one per-call seed (drawn
once, outside any recomputed region) folded with the site's fixed number. The
same call thus always sees the same masks, recomputed or not.

Keras' own `Dropout` has no way to take a seed tensor per call, and
`tf.nn.experimental.stateless_dropout` draws one random number per
element; the mask here is drawn from `tf.random.stateless_uniform` bits, two
16-bit decisions per draw (see `_keep_mask`).
"""

from typing import Optional, Union

import tensorflow as tf

Dim = Union[int, tf.Tensor]

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
                      prescaled: bool = False) -> tf.Tensor:
  """Inverted dropout with a mask fixed by (`seed`, `site`).

  Args:
    x: any float tensor.
    rate: drop probability in [0, 1).
    seed: <int32>[2] per-call seed, or None when not training.
    site: a number unique to this dropout site within the model.
    training: dropout applies only when True.
    prescaled: `x` already carries the `keep_gain(rate)` factor (folded into
      an earlier multiply by the caller), so only the mask is applied.

  Returns:
    A tensor like `x`.
  """
  if not _applies(rate, seed, training):
    return x
  return _apply(x, _keep_mask(tf.shape(x), rate, fold_seed(seed, site)),
                rate, prescaled)


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



# Philox (`tf.random.Algorithm.PHILOX`); each 128-bit block holds eight of
# the 16-bit numbers.
_PHILOX = 1
_HALVES_PER_BLOCK = 8


def mask_halves(folded: tf.Tensor, start, count) -> tf.Tensor:
  """<uint16>[count]: the 16-bit numbers [start, start + count) of the
  Philox stream keyed by `folded` (a `fold_seed` result), counter from 0.

  Number e is half e % 2 (low first) of 32-bit word e // 2, the order of
  `tf.bitcast(uint32 -> uint16)`. A piece of the stream is drawn alone by
  starting the counter at its block (`tf.random.stateless_uniform` has no
  offset), so a chunked computation sees exactly the numbers of the whole
  one.
  """
  key = tf.reshape(tf.bitcast(tf.bitcast(folded, tf.int64), tf.uint64), [1])
  start = tf.cast(start, tf.int64)
  count = tf.cast(count, tf.int64)
  step = start // _HALVES_PER_BLOCK
  skip = start - step * _HALVES_PER_BLOCK
  counter = tf.bitcast(tf.stack([step, tf.constant(0, tf.int64)]), tf.uint64)
  bits = tf.raw_ops.StatelessRandomUniformFullIntV2(
      shape=tf.reshape((skip + count + 1) // 2, [1]), key=key,
      counter=counter, alg=_PHILOX, dtype=tf.uint32)
  halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])
  return tf.slice(halves, tf.reshape(skip, [1]), tf.reshape(count, [1]))


def _keep_mask(shape: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
  """<bool>[shape]: True with probability 1 - rate (to 1/65536).

  Each 32-bit Philox draw is split into two 16-bit numbers: on CPU the random
  draws were the largest cost of attention dropout (tens of millions of
  elements per layer), and this halves them. Keras' and TF's dropouts spend
  one 32-bit draw per element.
  """
  halves = mask_halves(seed, 0, tf.reduce_prod(shape))
  keep = halves >= tf.constant(keep_threshold(rate), tf.uint16)
  return tf.reshape(keep, shape)


def row_dropout(probs: tf.Tensor, rate: float, seed: Optional[tf.Tensor],
                site: int, training: bool, row_start: Dim = 0,
                row_axis: int = 2, prescaled: bool = False) -> tf.Tensor:
  """Dropout whose mask is cut along `row_axis` (attention probabilities).

  The mask of the rows [row_start, row_start + n) is the same whether the
  tensor is computed whole or in chunks of rows (blocks of long queries,
  global queries): the whole mask is one Philox stream laid out rows first,
  [rows, *other axes], and a piece is drawn alone by starting the counter at
  its offset (`tf.random.stateless_uniform` has no offset). Same keep
  probability and scaling as `stateless_dropout`.

  Args:
    probs: <float>[..., n, ...] with the n rows at `row_axis`.
    rate, seed, site, training, prescaled: as `stateless_dropout`.
    row_start: the index of this tensor's first row in the whole tensor.
    row_axis: the row axis (non-negative).

  Returns:
    A tensor like `probs`.
  """
  if not _applies(rate, seed, training):
    return probs
  return _apply(probs, row_keep_mask(seed, site, rate, row_start,
                                     tf.shape(probs), row_axis),
                rate, prescaled)


def row_keep_mask(seed: tf.Tensor, site: int, rate: float, row_start: Dim,
                  shape: tf.Tensor, row_axis: int = 2) -> tf.Tensor:
  """<bool>[shape]: rows [row_start, row_start + shape[row_axis]) of one
  seeded keep mask laid out rows first (see `row_dropout`)."""
  rank = int(shape.shape[0])
  rest = [i for i in range(rank) if i != row_axis]
  row_shape = tf.gather(shape, rest)
  num_rows = shape[row_axis]
  per_row = tf.reduce_prod(tf.cast(row_shape, tf.int64))
  halves = mask_halves(fold_seed(seed, site),
                       tf.cast(row_start, tf.int64) * per_row,
                       tf.cast(num_rows, tf.int64) * per_row)
  keep = halves >= tf.constant(keep_threshold(rate), tf.uint16)
  keep = tf.reshape(keep, tf.concat(
      [tf.reshape(tf.cast(num_rows, tf.int32), [1]),
       tf.cast(row_shape, tf.int32)], 0))
  # [n, *rest] -> the layout of the tensor.
  perm = list(range(1, row_axis + 1)) + [0] + list(range(row_axis + 1, rank))
  return tf.transpose(keep, perm)


def new_call_seed() -> tf.Tensor:
  """Draws a fresh <int32>[2] seed for one forward call."""
  return tf.random.uniform([2], minval=0, maxval=2**31 - 1, dtype=tf.int32)
