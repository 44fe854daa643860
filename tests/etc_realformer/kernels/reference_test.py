"""The kernels' NumPy reference: against the attention core it stands for
(TensorFlow's forward values and autodiff gradients), against cases whose
answer is known by hand, and its int8 codes against their definition."""

import numpy as np
import pytest

from etc_realformer.kernels import reference as ref
import fused_attention_testing as fat

STREAMS = dict(carried=(True, True), running_mean=True)
CASES = {
    "long": fat.BranchCase.long_branch(),
    "long_streams_dropout": fat.BranchCase.long_branch(
        dropout_rate=0.1, **STREAMS),
    "long_first_layer_l2g": fat.BranchCase.long_branch(
        carried=(False, True), has_prev=False, dropout_rate=0.3),
    "long_last_layer_no_ids": fat.BranchCase.long_branch(
        has_ids=False, block_len=5, num_blocks=4, global_len=7,
        carried=(True, True), emit=False),
    "global_streams_dropout": fat.BranchCase.global_branch(dropout_rate=0.1,
                                                           **STREAMS),
    "global_whole_tensor_dropout": fat.BranchCase.global_branch(
        has_ids=False, carried=(True, False), dropout_rate=0.2,
        by_rows=False, running_mean=True),
}


def _pieces(case, seed=1):
  p = fat.branch_pieces(case, seed=seed)
  if case.dropout_rate:
    p["seeds"] = fat.core_seeds()
  return p


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_is_the_attention_core(name):
  case = CASES[name]
  p = _pieces(case)
  want = ref.branch_forward(p, case)
  ctx, sums = fat.core_forward(case, p)
  assert ref.relative_error(ctx, want.ctx) < 1e-6
  for got, new in zip(sums, want.new):
    assert (got is None) == (new is None)
    if new is not None:
      assert ref.relative_error(got, new) < 1e-6
  rng = np.random.default_rng(5)
  dctx = rng.normal(size=want.ctx.shape)
  dnew = tuple(None if n is None else rng.normal(size=n.shape)
               for n in want.new)
  grads = ref.branch_backward(p, case, want, dctx, dnew)
  core = fat.core_gradients(case, p, dctx, dnew)
  for key, value in core.items():
    mine = (grads.prev[int(key[-1]) - 1] if key.startswith("prev")
            else getattr(grads, key))
    assert ref.relative_error(mine, value) < 1e-6, key
  if not case.has_ids:
    assert not grads.per_id.any()


def test_band_stride_rounds_three_blocks_up_to_16_bytes():
  assert ref.band_stride(16) == 48
  assert ref.band_stride(5) == 16
  assert ref.band_stride(6) == 32
  assert ref.band_stride(64) == 192


@pytest.mark.parametrize("has_ids", [True, False])
def test_codes_hold_masks_and_window_ids(has_ids):
  case = ref.BranchCase.long_branch(
      batch=1, num_heads=1, num_blocks=3, block_len=4, global_len=5, num_ids=6,
      has_ids=has_ids)
  p = ref.branch_pieces(case, seed=1, masked_rows=1)
  band, glob = p["codes1"], p["codes2"]
  b, lp = case.block_len, case.padded_len
  assert band.dtype == np.int8 and band.shape == (1, lp, ref.band_stride(b))
  assert glob.dtype == np.int8 and glob.shape == (1, lp, case.global_len)
  assert (band[..., 3 * b:] == ref.NO_ID).all()  # the row padding
  for i in range(lp):
    j = i % b
    for c in range(3 * b):
      w = c - j - 1  # the band column's window offset
      unmasked = p["add1"][0, i, c] == 0
      if has_ids and 0 <= w < 2 * b - 1:
        rel = p["ids1"][0, i, w]
        want = rel if unmasked else rel - 128
      else:
        want = 0 if unmasked else ref.NO_ID
      assert band[0, i, c] == want, (i, c)
  if has_ids:
    want_global = np.where(p["add2"] == 0, p["ids2"], p["ids2"] - 128)
  else:
    want_global = np.where(p["add2"] == 0, 0, ref.NO_ID)
  np.testing.assert_array_equal(glob, want_global)
  assert (band[0, -1, :3 * b] < 0).all() and (glob[0, -1] < 0).all()
  # What a kernel reads of a code: masked from the sign, the id from the
  # low 7 bits; NO_ID (masked, no relative term) on the band only.
  np.testing.assert_array_equal(band[..., :3 * b] < 0, p["add1"] != 0)
  np.testing.assert_array_equal(glob < 0, p["add2"] != 0)
  if has_ids:
    np.testing.assert_array_equal(glob & 0x7F, p["ids2"])
    assert not (glob == ref.NO_ID).any()


def _one_head_case():
  case = ref.BranchCase.long_branch(
      batch=1, num_heads=1, num_blocks=2, block_len=2, global_len=1,
      size_per_head=3, num_ids=2)
  p = ref.branch_pieces(case, seed=3, masked_rows=1)
  return case, p


def test_reference_attends_to_the_only_unmasked_key():
  case, p = _one_head_case()
  # Row 0 keeps the global key alone: its context is that key's value,
  # whatever its score.
  p["add1"][0, 0] = ref.NEG
  p["add2"][0, 0] = 0.0
  out = ref.branch_forward(p, case)
  np.testing.assert_allclose(out.ctx[0, 0, 0], p["v2"][0, 0, 0], rtol=1e-12)
  score = (p["q"][0, 0, 0].astype(np.float64) @ p["k2"][0, 0, 0] +
           p["per_id"][0, 0, p["ids2"][0, 0, 0], 0])
  # The masked band keys add exp(-10000 - score) terms: nothing in f64.
  assert abs(out.lse[0, 0, 0] - score) < 1e-9


def test_reference_without_ids_ignores_the_table_and_masks_rows():
  case, p = _one_head_case()
  case.has_ids = False
  ctx = ref.branch_forward(p, case).ctx
  p["per_id"] = p["per_id"] + 100.0
  np.testing.assert_array_equal(ctx, ref.branch_forward(p, case).ctx)
  assert (ctx[0, :, -1] == 0).all()  # the fully masked row
  assert np.abs(ctx[0, :, 0]).sum() > 0


def test_reference_is_uniform_over_equal_scores():
  case, p = _one_head_case()
  p["q"][:] = 0.0
  p["per_id"][:] = 0.0
  p["add1"][:] = 0.0
  p["add2"][:] = 0.0
  p["valid"][:] = 1.0
  out = ref.branch_forward(p, case)
  b = case.block_len
  keys = 3 * b + case.global_len
  for i in range(case.padded_len):
    k = i // b
    values = np.concatenate([p["v1"][0, 0, k * b:k * b + 3 * b],
                             p["v2"][0, 0]])
    np.testing.assert_allclose(out.ctx[0, 0, i],
                               values.astype(np.float64).mean(axis=0),
                               rtol=1e-12)
  np.testing.assert_allclose(out.lse, np.log(keys), rtol=1e-12)


def test_dropout_keeps_at_its_rate_and_index_is_rows_first():
  case = ref.BranchCase.long_branch(
      batch=2, num_heads=3, num_blocks=4, block_len=8, dropout_rate=0.25)
  seeds = np.array([5, -7, 123456, 99], np.int32)
  keep = ref.keep_mask(case, seeds, 0, case.widths[0])
  assert abs(keep.mean() - 0.75) < 0.02
  index = ref.dropout_index(case, 3)
  # Row block 0 of every (batch, head) precedes row block 1 of any.
  assert index[:, :, :8].max() < index[:, :, 8:].min()
  assert len(np.unique(index)) == index.size


def test_relative_error():
  assert ref.relative_error([1.0, 2.0], [1.0, 2.0]) == 0.0
  assert ref.relative_error([0.0, 0.0], [3.0, 4.0]) == pytest.approx(1.0)
  mask = np.array([True, False])
  assert ref.relative_error([1.0, 9.0], [1.0, 2.0], mask) == 0.0
  assert ref.relative_error([0.0], [0.0]) == 0.0
