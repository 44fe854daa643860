"""Seeded dropout: rate, scaling, determinism."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.layers import dropout
from etc_realformer.layers.dropout import keep_gain
from etc_realformer.layers.dropout import stateless_dropout


@pytest.mark.parametrize("rate", [0.1, 0.5])
@pytest.mark.parametrize("shape", [[4, 1001], [3, 5, 7]])  # odd sizes too
def test_rate_and_scale(rate, shape):
  x = tf.ones(shape)
  seed = tf.constant([3, 4])
  y = stateless_dropout(x, rate, seed, site=7, training=True).numpy()
  assert y.shape == tuple(shape)
  kept = y != 0
  assert abs(kept.mean() - (1 - rate)) < 4 * np.sqrt(rate * (1 - rate) /
                                                       kept.size)
  np.testing.assert_allclose(y[kept], 1.0 / (1.0 - rate), rtol=1e-4)
  # Unbiased in expectation.
  big = stateless_dropout(tf.ones([200000]), rate, seed, 1, True).numpy()
  assert abs(big.mean() - 1.0) < 0.01


def test_same_seed_same_mask_other_site_other_mask():
  x = tf.random.normal([64, 64])
  seed = tf.constant([1, 2])
  a = stateless_dropout(x, 0.3, seed, 5, True)
  b = stateless_dropout(x, 0.3, seed, 5, True)
  c = stateless_dropout(x, 0.3, seed, 6, True)
  assert np.array_equal(a.numpy(), b.numpy())
  assert not np.array_equal(a.numpy(), c.numpy())


def test_identity_when_not_training_and_bfloat16_kept():
  x = tf.cast(tf.random.normal([8, 8]), tf.bfloat16)
  assert stateless_dropout(x, 0.5, None, 0, False) is x
  y = stateless_dropout(x, 0.5, tf.constant([1, 1]), 0, True)
  assert y.dtype == tf.bfloat16


def test_keep_gain_is_one_over_the_mask_keep_probability():
  assert keep_gain(0.1) == 1.0 / (1.0 - 6554 / 65536)  # 0.1 to 1/65536
  assert keep_gain(0.1, training=False) == 1.0
  assert keep_gain(0.0) == 1.0


def test_prescaled_applies_the_same_mask_without_scaling():
  x = tf.random.normal([6, 333])
  seed = tf.constant([9, 8])
  scaled = stateless_dropout(x, 0.2, seed, 4, True)
  prescaled = stateless_dropout(x * keep_gain(0.2), 0.2, seed, 4, True,
                                prescaled=True)
  np.testing.assert_allclose(prescaled.numpy(), scaled.numpy(), rtol=1e-6)
  unscaled = stateless_dropout(x, 0.2, seed, 4, True, prescaled=True).numpy()
  kept = unscaled != 0
  np.testing.assert_array_equal(unscaled[kept], x.numpy()[kept])


def test_row_keep_mask_pieces_equal_the_whole():
  seed = tf.constant([7, 11], tf.int32)
  whole = dropout.row_keep_mask(seed, 3, 0.3, 0, tf.constant([2, 9, 3, 5]),
                                row_axis=1).numpy()
  assert whole.shape == (2, 9, 3, 5)
  assert 0.5 < whole.mean() < 0.9
  for start, size in ((0, 1), (1, 3), (4, 5), (8, 1)):
    piece = dropout.row_keep_mask(seed, 3, 0.3, start,
                                  tf.constant([2, size, 3, 5]), row_axis=1)
    np.testing.assert_array_equal(piece.numpy(),
                                  whole[:, start:start + size])
  other = dropout.row_keep_mask(seed, 4, 0.3, 0, tf.constant([2, 9, 3, 5]),
                                row_axis=1).numpy()
  assert (other != whole).any()


def test_row_dropout_scales_like_stateless_dropout():
  x = tf.ones([2, 3, 40, 7])
  seed = tf.constant([5, 6])
  y = dropout.row_dropout(x, 0.25, seed, 2, True).numpy()
  kept = y != 0
  np.testing.assert_allclose(y[kept], keep_gain(0.25), rtol=1e-6)
  assert abs(kept.mean() - 0.75) < 0.05
  assert dropout.row_dropout(x, 0.25, seed, 2, False) is x


def test_site_table_is_unique_per_layer():
  offsets = [*dropout.ATTENTION_PROBS_OFFSET.values(),
             dropout.ATTENTION_OUTPUT_LONG_OFFSET,
             dropout.ATTENTION_OUTPUT_GLOBAL_OFFSET,
             dropout.FEED_FORWARD_LONG_OFFSET,
             dropout.FEED_FORWARD_GLOBAL_OFFSET]
  assert len(set(offsets)) == len(offsets)
  assert max(offsets) < dropout.SITES_PER_LAYER
  sites = {dropout.SITE_EMBEDDING_LONG, dropout.SITE_EMBEDDING_GLOBAL}
  for layer in range(3):
    layer_sites = {dropout.layer_sites(layer) + o for o in offsets}
    assert not sites & layer_sites
    sites |= layer_sites
