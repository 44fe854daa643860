"""The sparse band's block layouts (`etc_realformer/layers/blocking.py`)."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.layers import blocking


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
