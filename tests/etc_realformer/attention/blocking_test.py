"""The sparse band's block layouts (`etc_realformer/attention/blocking.py`)."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.attention import blocking


@pytest.mark.parametrize("seq_len,block_len", [(12, 4), (13, 4), (3, 4),
                                               (1, 1)])
def test_band_blocks_hold_each_blocks_neighbours(seq_len, block_len):
  x = np.random.default_rng(0).normal(size=[2, 3, seq_len, 5]).astype(
      np.float32)
  got = blocking.band_blocks(tf.constant(x), block_len, axis=2).numpy()
  nb = -(-seq_len // block_len)
  assert got.shape == (2, 3, nb, 3 * block_len, 5)
  for i in range(nb):
    for j in range(3 * block_len):
      pos = (i - 1) * block_len + j
      want = x[:, :, pos] if 0 <= pos < seq_len else 0.0
      np.testing.assert_array_equal(got[:, :, i, j], want)


def test_band_blocks_gradient_sums_the_three_copies():
  x = tf.random.normal([1, 10, 2])
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = blocking.band_blocks(x, 3, axis=1)
  grad = tape.gradient(y, x).numpy()
  # Each position is in its own block and in its two neighbours' (when
  # those exist): 4 blocks of 3 for 10 positions.
  counts = np.array([2, 2, 2, 3, 3, 3, 3, 3, 3, 2], np.float32)
  np.testing.assert_array_equal(grad[0, :, 0], counts)


@pytest.mark.parametrize("seq_len", [7, 8, 9])
def test_padded_blocks_then_band_is_band_blocks(seq_len):
  x = tf.constant(np.arange(2 * seq_len * 3, dtype=np.float32).reshape(
      [2, seq_len, 3]))
  padded = blocking.padded_blocks(x, 4, axis=1)
  nb = -(-seq_len // 4)
  assert padded.shape == (2, nb + 2, 4, 3)
  np.testing.assert_array_equal(
      blocking.band_from_padded(padded, 0, nb, axis=1).numpy(),
      blocking.band_blocks(x, 4, axis=1).numpy())
  # A chunk of blocks sees what the whole sees for those blocks.
  np.testing.assert_array_equal(
      blocking.band_from_padded(padded, 1, nb - 1, axis=1).numpy(),
      blocking.band_blocks(x, 4, axis=1).numpy()[:, 1:])


def test_merge_and_split_axes_are_inverse():
  x = tf.reshape(tf.range(2 * 3 * 4 * 5), [2, 3, 4, 5])
  merged = blocking.merge_axes(x, 1)
  assert merged.shape == (2, 12, 5)
  np.testing.assert_array_equal(blocking.split_axis(merged, 1, 4).numpy(),
                                x.numpy())


@pytest.mark.parametrize("seq_len,radius", [(9, 2), (10, 3), (4, 5)])
def test_window_layouts_round_trip(seq_len, radius):
  window = tf.constant(np.random.default_rng(1).normal(
      size=[2, seq_len, 2 * radius + 1]).astype(np.float32))
  in_range = blocking.window_in_range_mask(seq_len, radius).numpy()
  window = window * in_range
  blocked = blocking.window_to_blocked(window, radius)
  np.testing.assert_allclose(
      blocking.blocked_to_window(blocked, seq_len, radius).numpy(),
      window.numpy())
  full = blocking.window_to_full(window, radius)
  assert full.shape == (2, seq_len, seq_len)
  np.testing.assert_allclose(blocking.full_to_window(full, radius).numpy(),
                             window.numpy())
