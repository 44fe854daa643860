"""The Triton kernels under Triton's interpreter (CPU, torch tensors, in a
child process: `triton_testing`) against the float64 NumPy reference."""

import importlib.util

import ml_dtypes
import numpy as np
import pytest

import fused_attention_testing as fat
import triton_testing

# Looked up, not imported: Triton must not load into this process
# (`triton_testing`).
pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "triton")),
    reason="the kernels' tests need torch and Triton (requirements-kernels.txt)")

# Tolerances relative to the context's scale: float32 as the project's
# references; bfloat16 and float16 inputs (the reference reads the same
# rounded inputs), with probabilities rounded for the context product.
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 3e-3}
INPUTS = ("q", "k_band", "v_band", "k_global", "v_global")
ORDER = ("q", "k_band", "v_band", "k_global", "v_global", "per_id",
         "codes_band", "codes_global", "valid")


def _rounded(pieces, dtype):
  """The pieces with the kernel's inputs rounded to `dtype` (as float32)."""
  if dtype == "float32":
    return pieces
  np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
  out = dict(pieces)
  for name in INPUTS:
    out[name] = pieces[name].astype(np_dtype).astype(np.float32)
  return out


def _long_forward(case, pieces, dtype, block_m=64, block_n=64,
                  pick_in_registers=False):
  grid = (-(-case.padded_len // block_m), case.batch * case.num_heads)
  shape = pieces["q"].shape
  return triton_testing.Launch(
      "long_side_forward", grid,
      [pieces[n] for n in ORDER] + ["ctx", "lse", case.num_heads,
                                    case.padded_len, case.global_len,
                                    case.num_ids, case.block_len,
                                    pieces["codes_band"].shape[-1]],
      dict(D=case.size_per_head, BM=block_m, BN=block_n,
           R=1 << max(case.num_ids - 1, 0).bit_length(),
           HAS_IDS=case.has_ids, IEEE=dtype == "float32",
           PICK_IN_REGISTERS=pick_in_registers),
      outputs={"ctx": (shape, dtype), "lse": (shape[:3], "float32")},
      dtypes={ORDER.index(n): dtype for n in INPUTS})


# Every launch of the module runs in one child process (its start-up and
# Triton's import cost seconds); the tests read their results.
CASES = {
    # name: (case, dtype, (block_m, block_n, pick_in_registers))
    "float32": (fat.LongSideCase(), "float32", (64, 64)),
    "bfloat16": (fat.LongSideCase(), "bfloat16", (64, 64)),
    "float16": (fat.LongSideCase(), "float16", (64, 64)),
    # No relative term.
    "no_ids": (fat.LongSideCase(num_blocks=9, global_len=37, has_ids=False),
               "float32", (64, 64)),
    # Many short blocks: a tile spans several bands.
    "short_blocks": (fat.LongSideCase(num_blocks=9, block_len=5,
                                      global_len=37), "float32", (16, 16)),
    # A block length that divides no tile.
    "odd_blocks": (fat.LongSideCase(num_blocks=9, block_len=9,
                                    global_len=37), "float32", (32, 16)),
    # The relative scores picked from the tile's table in registers.
    "pick_in_registers": (fat.LongSideCase(num_blocks=9, block_len=9,
                                           global_len=37), "float32",
                          (32, 16, True)),
}


@pytest.fixture(scope="module")
def results():
  pieces = {name: _rounded(fat.long_side_pieces(case, seed=i), dtype)
            for i, (name, (case, dtype, _)) in enumerate(CASES.items())}
  launches = [_long_forward(case, pieces[name], dtype, *tiles)
              for name, (case, dtype, tiles) in CASES.items()]
  outputs = triton_testing.run_launches(launches)
  return {name: (pieces[name], out) for name, out in zip(CASES, outputs)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_long_forward_matches_reference(results, name):
  case, dtype, _ = CASES[name]
  pieces, out = results[name]
  want_ctx, want_lse = fat.long_side_reference(pieces, case.block_len,
                                               case.has_ids)
  ctx, lse = out["ctx"], out["lse"]
  assert np.isfinite(ctx).all() and np.isfinite(lse).all()
  assert fat.relative_error(ctx, want_ctx) < TOLERANCE[dtype]
  # The statistic of valid rows (an invalid row's masked scores carry no
  # relative term in the kernels; its context is zero either way).
  valid_rows = np.broadcast_to(pieces["valid"][:, None] > 0, lse.shape)
  assert fat.relative_error(lse, want_lse, valid_rows) < 1e-6
  # Fully masked rows (the last 3 of batch 0) are exactly zero.
  assert not ctx[0, :, -3:].any()
