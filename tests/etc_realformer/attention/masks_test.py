"""Side inputs -> additive masks, valid rows and ids in the layout of each
attention path (`etc_realformer/attention/masks.py`), against NumPy
references of the band layouts."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.attention import masks as ai

B, L, G, R = 2, 7, 3, 2
BLOCK = R + 1
NB = -(-L // BLOCK)


def _side(seed=0):
  rng = np.random.RandomState(seed)
  side = {
      "l2l_att_mask": rng.randint(0, 2, [B, L, 2 * R + 1]),
      "l2g_att_mask": rng.randint(0, 2, [B, L, G]),
      "g2g_att_mask": rng.randint(0, 2, [B, G, G]),
      "g2l_att_mask": rng.randint(0, 2, [B, G, L]),
      "l2l_relative_att_ids": rng.randint(1, 9, [B, L, 2 * R + 1]),
      "l2g_relative_att_ids": rng.randint(1, 9, [B, L, G]),
      "g2g_relative_att_ids": rng.randint(1, 9, [B, G, G]),
      "g2l_relative_att_ids": rng.randint(1, 9, [B, G, L]),
  }
  # Long query 4 of example 0 and global query 1 of example 1 see nothing.
  side["l2l_att_mask"][0, 4] = 0
  side["l2g_att_mask"][0, 4] = 0
  side["g2g_att_mask"][1, 1] = 0
  side["g2l_att_mask"][1, 1] = 0
  # Long query 0 of example 1 allows only window slots before the sequence
  # start: those never count.
  side["l2l_att_mask"][1, 0] = [1, 1, 0, 0, 0]
  side["l2g_att_mask"][1, 0] = 0
  return side


def _window_to_full(window):
  """[B, L, 2r+1] -> [B, L, L]; zero outside the band."""
  full = np.zeros([B, L, L], window.dtype)
  for i in range(L):
    for j in range(2 * R + 1):
      if 0 <= i - R + j < L:
        full[:, i, i - R + j] = window[:, i, j]
  return full


def _window_to_blocked(window):
  """[B, L, 2r+1] -> [B, nb, b, 3b]: block k's row q sees key block
  positions (k - 1) b .. (k + 2) b - 1; zero outside the band."""
  blocked = np.zeros([B, NB, BLOCK, 3 * BLOCK], window.dtype)
  for k in range(NB):
    for row in range(BLOCK):
      query = k * BLOCK + row
      for col in range(3 * BLOCK):
        key = (k - 1) * BLOCK + col
        j = key - query + R
        if query < L and 0 <= key < L and 0 <= j <= 2 * R:
          blocked[:, k, row, col] = window[:, query, j]
  return blocked


def _blocks(x):
  """[B, L, ...] -> [B, nb, b, ...], zero padded."""
  pad = np.zeros([B, NB * BLOCK - L, *x.shape[2:]], x.dtype)
  return np.concatenate([x, pad], 1).reshape([B, NB, BLOCK, *x.shape[2:]])


def _adder(allowed):
  return np.where(allowed > 0, 0.0, ai.MASK_ADDER)


def _prepare(side, sparse):
  return ai.prepare_side_inputs(
      {k: tf.constant(v) for k, v in side.items()}, batch_size=B,
      long_len=L, global_len=G, local_radius=R, sparse=sparse)


def _long_valid(side):
  """1.0 where a long query has an in-range l2l key or an l2g key."""
  return (_window_to_full(side["l2l_att_mask"]).any(-1) |
          side["l2g_att_mask"].any(-1)).astype(np.float32)


def test_full_layout_matches_numpy():
  side = _side()
  out = _prepare(side, sparse=False)
  assert not out.sparse and out.long_len == L
  np.testing.assert_array_equal(
      out.l2l_adder, _adder(_window_to_full(side["l2l_att_mask"]))[:, None])
  np.testing.assert_array_equal(out.l2g_adder,
                                _adder(side["l2g_att_mask"])[:, None])
  long_valid = _long_valid(side)
  assert long_valid[0, 4] == long_valid[1, 0] == 0.0
  assert long_valid.sum() > 2
  np.testing.assert_array_equal(out.long_valid, long_valid[:, None, :, None])
  np.testing.assert_array_equal(
      out.l2l_ids, _window_to_full(side["l2l_relative_att_ids"]))
  np.testing.assert_array_equal(out.l2g_ids, side["l2g_relative_att_ids"])


def test_sparse_layout_matches_numpy():
  side = _side()
  out = _prepare(side, sparse=True)
  assert out.sparse
  assert out.l2l_adder.shape == (B, 1, NB, BLOCK, 3 * BLOCK)
  # Padded query rows past L are masked everywhere and not valid.
  np.testing.assert_array_equal(
      out.l2l_adder,
      _adder(_window_to_blocked(side["l2l_att_mask"]))[:, None])
  np.testing.assert_array_equal(
      out.l2g_adder, _adder(_blocks(side["l2g_att_mask"]))[:, None])
  np.testing.assert_array_equal(
      out.long_valid, _blocks(_long_valid(side))[:, None, :, :, None])
  np.testing.assert_array_equal(
      out.l2l_ids, _blocks(side["l2l_relative_att_ids"]))
  np.testing.assert_array_equal(
      out.l2g_ids, _blocks(side["l2g_relative_att_ids"]))


@pytest.mark.parametrize("sparse", [False, True])
def test_global_branch_is_the_same_on_both_paths(sparse):
  side = _side()
  out = _prepare(side, sparse)
  np.testing.assert_array_equal(out.g2g_adder,
                                _adder(side["g2g_att_mask"])[:, None])
  np.testing.assert_array_equal(out.g2l_adder,
                                _adder(side["g2l_att_mask"])[:, None])
  global_valid = (side["g2g_att_mask"].any(-1) |
                  side["g2l_att_mask"].any(-1)).astype(np.float32)
  assert global_valid[1, 1] == 0.0 and global_valid.sum() > 1
  np.testing.assert_array_equal(out.global_valid,
                                global_valid[:, None, :, None])
  np.testing.assert_array_equal(out.g2g_ids, side["g2g_relative_att_ids"])
  np.testing.assert_array_equal(out.g2l_ids, side["g2l_relative_att_ids"])


@pytest.mark.parametrize("sparse", [False, True])
def test_missing_side_inputs_allow_everything_in_the_band(sparse):
  out = _prepare({}, sparse)
  band = np.ones([B, L, 2 * R + 1], np.int32)
  to_layout = _window_to_blocked if sparse else _window_to_full
  np.testing.assert_array_equal(out.l2l_adder,
                                _adder(to_layout(band))[:, None])
  # l2g: only the padded query rows past L (sparse) are masked.
  l2g = np.ones([B, L, G], np.int32)
  np.testing.assert_array_equal(
      out.l2g_adder, _adder(_blocks(l2g) if sparse else l2g)[:, None])
  for adder in (out.g2g_adder, out.g2l_adder):
    assert np.all(adder.numpy() == 0.0)
  valid = _blocks(np.ones([B, L], np.float32)) if sparse else np.ones([B, L])
  np.testing.assert_array_equal(np.squeeze(out.long_valid.numpy(), (1, -1)),
                                valid)
  assert np.all(out.global_valid.numpy() == 1.0)
  assert (out.l2l_ids, out.l2g_ids, out.g2g_ids, out.g2l_ids) == (
      None, None, None, None)


def test_branch_masks_carry_ids_only_for_relative_layers():
  out = _prepare(_side(), sparse=True)
  long_masks = out.long_masks(relative=True)
  assert long_masks.adders.first is out.l2l_adder
  assert long_masks.adders.second is out.l2g_adder
  assert long_masks.valid is out.long_valid
  assert long_masks.ids.first is out.l2l_ids
  assert long_masks.ids.second is out.l2g_ids
  global_masks = out.global_masks(relative=False)
  assert global_masks.adders.first is out.g2g_adder
  assert global_masks.adders.second is out.g2l_adder
  assert global_masks.valid is out.global_valid
  assert global_masks.ids.first is None and global_masks.ids.second is None


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float16])
def test_adder_keeps_a_fully_masked_row_finite(dtype):
  # -10000, not -inf: a row with every key masked stays finite in every
  # compute dtype (the core then zeroes it through `*_valid`).
  out = _prepare(_side(), sparse=False)
  scores = tf.constant(np.random.RandomState(1).normal(
      scale=10.0, size=[L, G]), tf.float32)
  logits = tf.cast(scores + out.l2g_adder[0, 0], dtype)
  probs = tf.nn.softmax(logits).numpy().astype(np.float32)
  assert np.isfinite(probs).all()
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-2)
  assert out.long_valid[0, 0, 4, 0] == 0.0
