"""The kernels' NumPy reference against cases whose answer is known by hand,
and its int8 codes against their definition."""

import numpy as np
import pytest

from etc_realformer.kernels import reference as ref


def test_band_stride_rounds_three_blocks_up_to_16_bytes():
  assert ref.band_stride(16) == 48
  assert ref.band_stride(5) == 16
  assert ref.band_stride(6) == 32
  assert ref.band_stride(64) == 192


@pytest.mark.parametrize("has_ids", [True, False])
def test_codes_hold_masks_and_window_ids(has_ids):
  case = ref.LongSideCase(batch=1, num_heads=1, num_blocks=3, block_len=4,
                          global_len=5, num_ids=6, has_ids=has_ids)
  p = ref.long_side_pieces(case, seed=1, masked_rows=1)
  band, glob = p["codes_band"], p["codes_global"]
  b, lp = case.block_len, case.padded_len
  assert band.dtype == np.int8 and band.shape == (1, lp, ref.band_stride(b))
  assert glob.dtype == np.int8 and glob.shape == (1, lp, case.global_len)
  assert (band[..., 3 * b:] == -1).all()  # the row padding is masked
  for i in range(lp):
    j = i % b
    for c in range(3 * b):
      w = c - j - 1  # the band column's window offset
      if p["add_band"][0, i, c] != 0:
        want = -1
      elif has_ids and 0 <= w < 2 * b - 1:
        want = p["ids_window"][0, i, w]
      else:
        want = 0
      assert band[0, i, c] == want, (i, c)
  want_global = np.where(p["add_global"] == 0,
                         p["ids_global"] if has_ids else 0, -1)
  np.testing.assert_array_equal(glob, want_global)
  assert (band[0, -1] == -1).all() and (glob[0, -1] == -1).all()


def _one_head_case():
  case = ref.LongSideCase(batch=1, num_heads=1, num_blocks=2, block_len=2,
                          global_len=1, size_per_head=3, num_ids=2)
  p = ref.long_side_pieces(case, seed=3, masked_rows=1)
  return case, p


def test_reference_attends_to_the_only_unmasked_key():
  case, p = _one_head_case()
  # Row 0 keeps the global key alone: its context is that key's value,
  # whatever its score.
  p["add_band"][0, 0] = ref.NEG
  p["add_global"][0, 0] = 0.0
  ctx, lse = ref.long_side_reference(p, case.block_len)
  np.testing.assert_allclose(ctx[0, 0, 0], p["v_global"][0, 0, 0],
                             rtol=1e-12)
  score = (p["q"][0, 0, 0].astype(np.float64) @ p["k_global"][0, 0, 0] +
           p["per_id"][0, 0, p["ids_global"][0, 0, 0], 0])
  # The masked band keys add exp(-10000 - score) terms: nothing in f64.
  assert abs(lse[0, 0, 0] - score) < 1e-9


def test_reference_without_ids_ignores_the_table_and_masks_rows():
  case, p = _one_head_case()
  ctx, _ = ref.long_side_reference(p, case.block_len, has_ids=False)
  p["per_id"] = p["per_id"] + 100.0
  again, _ = ref.long_side_reference(p, case.block_len, has_ids=False)
  np.testing.assert_array_equal(ctx, again)
  assert (ctx[0, :, -1] == 0).all()  # the fully masked row
  assert np.abs(ctx[0, :, 0]).sum() > 0


def test_reference_is_uniform_over_equal_scores():
  case, p = _one_head_case()
  p["q"][:] = 0.0
  p["per_id"][:] = 0.0
  p["add_band"][:] = 0.0
  p["add_global"][:] = 0.0
  p["valid"][:] = 1.0
  ctx, lse = ref.long_side_reference(p, case.block_len)
  b = case.block_len
  keys = 3 * b + case.global_len
  for i in range(case.padded_len):
    k = i // b
    values = np.concatenate([p["v_band"][0, 0, k * b:k * b + 3 * b],
                             p["v_global"][0, 0]])
    np.testing.assert_allclose(ctx[0, 0, i],
                               values.astype(np.float64).mean(axis=0),
                               rtol=1e-12)
  np.testing.assert_allclose(lse, np.log(keys), rtol=1e-12)


def test_relative_error():
  assert ref.relative_error([1.0, 2.0], [1.0, 2.0]) == 0.0
  assert ref.relative_error([0.0, 0.0], [3.0, 4.0]) == pytest.approx(1.0)
  mask = np.array([True, False])
  assert ref.relative_error([1.0, 9.0], [1.0, 2.0], mask) == 0.0
  assert ref.relative_error([0.0], [0.0]) == 0.0
