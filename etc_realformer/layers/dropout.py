"""Seeded (stateless) dropout.

Gradient checkpointing recomputes a chunk of layers in the backward pass; a
stateful dropout would draw new masks there and the gradients would belong to
a different function. Every dropout site in the encoder therefore draws its
mask from `tf.random.stateless_*` with a seed made of one per-call seed (drawn
once, outside any recomputed region) folded with the site's fixed number. The
same call thus always sees the same masks, recomputed or not.

Keras' own `Dropout` has no way to take a seed tensor per call, and
`tf.nn.experimental.stateless_dropout` takes one: we build on the latter.
"""

from typing import Optional

import tensorflow as tf


def fold_seed(seed: tf.Tensor, site: int) -> tf.Tensor:
  """A new <int32>[2] seed for dropout site `site`, derived from `seed`."""
  return tf.random.experimental.stateless_fold_in(seed, site)


def stateless_dropout(x: tf.Tensor, rate: float, seed: Optional[tf.Tensor],
                      site: int, training: bool) -> tf.Tensor:
  """Inverted dropout with a mask fixed by (`seed`, `site`).

  Args:
    x: any float tensor.
    rate: drop probability in [0, 1).
    seed: <int32>[2] per-call seed, or None when not training.
    site: a number unique to this dropout site within the model.
    training: dropout applies only when True.

  Returns:
    A tensor like `x`.
  """
  if not training or rate == 0.0:
    return x
  if seed is None:
    raise ValueError("stateless_dropout needs a seed when training")
  return tf.nn.experimental.stateless_dropout(
      x, rate=rate, seed=fold_seed(seed, site))


def new_call_seed() -> tf.Tensor:
  """Draws a fresh <int32>[2] seed for one forward call."""
  return tf.random.uniform([2], minval=0, maxval=2**31 - 1, dtype=tf.int32)
