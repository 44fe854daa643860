"""The attention core's rules: RealFormer's stream rule, the fused softmax,
and one branch computed whole or in chunks of rows."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.attention import core
from etc_realformer.attention.masks import MASK_ADDER
from etc_realformer.attention.pieces import BranchInputs
from etc_realformer.attention.pieces import BranchMasks
from etc_realformer.attention.pieces import PatternPair
from etc_realformer.attention.pieces import ScoreInputs


def test_residual_rule():
  scores = tf.constant([1.0, 2.0])
  previous = tf.constant([3.0, -1.0])
  new, logits = core.residual_logits(scores, previous, True, 2, False)
  np.testing.assert_array_equal(new.numpy(), [4.0, 1.0])
  np.testing.assert_array_equal(logits.numpy(), [4.0, 1.0])
  # The running mean divides what the softmax sees, not what is carried.
  new, logits = core.residual_logits(scores, previous, True, 2, True)
  np.testing.assert_array_equal(new.numpy(), [4.0, 1.0])
  np.testing.assert_array_equal(logits.numpy(), [2.0, 0.5])
  # The first layer starts the sum; a pattern not carried has none.
  new, logits = core.residual_logits(scores, None, True, 1, True)
  np.testing.assert_array_equal(new.numpy(), scores.numpy())
  new, logits = core.residual_logits(scores, previous, False, 3, True)
  assert new is None
  np.testing.assert_array_equal(logits.numpy(), scores.numpy())


def test_fused_softmax_is_one_softmax_over_both_key_sets():
  rng = np.random.RandomState(0)
  a = rng.normal(size=[2, 3, 4]).astype(np.float32)
  b = rng.normal(size=[2, 3, 5]).astype(np.float32)
  valid = np.ones([2, 3, 1], np.float32)
  pa, pb = core.fused_softmax(tf.constant(a), tf.constant(b),
                              tf.constant(valid))
  joint = tf.nn.softmax(np.concatenate([a, b], -1)).numpy()
  np.testing.assert_allclose(np.concatenate([pa, pb], -1), joint, rtol=1e-6)
  pa, pb = core.fused_softmax(tf.constant(a), tf.constant(b),
                              tf.constant(valid), gain=2.0)
  np.testing.assert_allclose(np.concatenate([pa, pb], -1), 2.0 * joint,
                             rtol=1e-6)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float16])
def test_fully_masked_rows_get_zeros_in_every_dtype(dtype):
  # Every key masked: the adders make all logits -10000; the row is not
  # valid, so it attends to nothing (and stays finite).
  logits = tf.cast(tf.fill([2, 3], MASK_ADDER), dtype)
  pa, pb = core.fused_softmax(tf.cast(logits, tf.float32),
                              tf.cast(logits, tf.float32),
                              tf.zeros([2, 1]))
  assert np.all(pa.numpy() == 0.0) and np.all(pb.numpy() == 0.0)


@pytest.mark.parametrize("gain", [1.0, 1.25])
def test_low_precision_softmax_gradient_is_autodiffs(gain):
  # In float32 the hand-written gradient must equal autodiff's exactly (to
  # rounding); a zeroed row (valid 0) gets zeros and no gradient.
  rng = np.random.RandomState(1)
  a = tf.constant(rng.normal(size=[2, 3, 4]).astype(np.float32))
  b = tf.constant(rng.normal(size=[2, 3, 5]).astype(np.float32))
  valid = tf.constant([[[1.0], [0.0], [1.0]], [[1.0], [1.0], [1.0]]])
  up_a = tf.constant(rng.normal(size=[2, 3, 4]).astype(np.float32))
  up_b = tf.constant(rng.normal(size=[2, 3, 5]).astype(np.float32))

  def loss_and_grads(fn):
    with tf.GradientTape() as tape:
      tape.watch([a, b])
      pa, pb = fn(a, b)
      loss = (tf.reduce_sum(tf.cast(pa, tf.float32) * up_a) +
              tf.reduce_sum(tf.cast(pb, tf.float32) * up_b))
    return [pa, pb] + tape.gradient(loss, [a, b])

  auto = loss_and_grads(lambda x, y: core.fused_softmax(x, y, valid, gain))
  hand = loss_and_grads(lambda x, y: core.fused_softmax_low(
      x, y, valid, gain, tf.float32))
  for h, e in zip(hand, auto):
    np.testing.assert_allclose(h.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
  assert np.all(hand[2].numpy()[0, 1] == 0.0)
  low = loss_and_grads(lambda x, y: core.fused_softmax_low(
      x, y, valid, gain, tf.bfloat16))
  assert low[0].dtype == tf.bfloat16 and low[2].dtype == tf.float32
  for h, e in zip(low, auto):
    h = tf.cast(h, tf.float32).numpy()
    assert np.isfinite(h).all()
    # bfloat16 keeps 8 bits: ~0.4 % of each value, judged on the scale.
    assert np.max(np.abs(h - e.numpy())) < 2e-2 * np.max(np.abs(e.numpy()))


def _side_pieces(rng, rows, keys_a, keys_b, d=4, heads=2):
  def normal(*shape):
    return tf.constant(rng.normal(size=shape).astype(np.float32))

  def adder(keys):
    return tf.constant(MASK_ADDER * (rng.rand(1, 1, rows, keys) < 0.3),
                       tf.float32)

  return BranchInputs(
      scores=ScoreInputs(normal(1, heads, rows, d),
                         PatternPair(normal(1, heads, keys_a, d),
                                     normal(1, heads, keys_b, d))),
      values=PatternPair(normal(1, heads, keys_a, d),
                         normal(1, heads, keys_b, d)),
      masks=BranchMasks(adders=PatternPair(adder(keys_a), adder(keys_b)),
                        valid=tf.ones([1, 1, rows, 1])),
      sums=PatternPair(first=normal(1, heads, rows, keys_a)),
      seed=tf.constant([1, 2]))


def test_a_branch_in_chunks_of_rows_equals_the_whole():
  rng = np.random.RandomState(3)
  x = _side_pieces(rng, rows=7, keys_a=7, keys_b=11)
  spec = core.BranchSpec(
      patterns=("g2g", "g2l"),
      streams=core.StreamSpec(carried=("g2g",), num_summed=2,
                              running_mean=True),
      dropout=core.ProbsDropout(rate=0.3, training=True, first_site=18))
  whole = core.attend_branch(spec, 0, 7, x)
  assert whole.sums.first is not None and whole.sums.second is None
  assert whole.probs is None

  def rows(t, start, size):
    return t[:, :, start:start + size]

  for start, size in ((0, 3), (3, 4)):
    part = dataclasses.replace(
        x, scores=dataclasses.replace(x.scores,
                                      q=rows(x.scores.q, start, size)),
        masks=BranchMasks(
            adders=PatternPair(*(rows(a, start, size)
                                 for a in x.masks.adders)),
            valid=rows(x.masks.valid, start, size)),
        sums=PatternPair(first=rows(x.sums.first, start, size)))
    chunk = core.attend_branch(spec, start, size, part)
    for got, expected in zip(tf.nest.flatten(chunk), tf.nest.flatten(whole)):
      np.testing.assert_allclose(got.numpy(),
                                 rows(expected, start, size).numpy(),
                                 rtol=1e-6, atol=1e-6)
