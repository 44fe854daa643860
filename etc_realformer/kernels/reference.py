"""A float64 NumPy reference of the fused attention kernels, and random
pieces in their layouts (`triton_attention` docstring).

Written from the definitions (window ids, band columns), not from the
kernels' tiling. NumPy alone: the tests load it through the package, the
GPU check (`tools/gpu_kernel_check.py`) by path on a machine without
TensorFlow.
"""

import dataclasses
from typing import Dict

import numpy as np

NEG = -10000.0


@dataclasses.dataclass
class LongSideCase:
  """Sizes of a long-side problem (Lp = num_blocks * block_len)."""
  batch: int = 2
  num_heads: int = 2
  num_blocks: int = 6
  block_len: int = 24
  global_len: int = 80
  size_per_head: int = 16
  num_ids: int = 7
  has_ids: bool = True

  @property
  def padded_len(self) -> int:
    return self.num_blocks * self.block_len


def long_side_pieces(case: LongSideCase, seed: int = 0,
                     masked_rows: int = 3) -> Dict[str, np.ndarray]:
  """Float32 pieces in the kernels' layouts (triton_attention docstring).

  Masks: random hard masks on both patterns, l2l adders -10000 outside the
  window (as `blocking.window_to_blocked` leaves them), and the last
  `masked_rows` queries of batch 0 fully masked (valid 0). Both forms: the
  XLA path's (ids_window, ids_global, add_band, add_global), which the
  reference reads, and the kernels' codes (codes_band, codes_global).
  """
  rng = np.random.default_rng(seed)
  b, lp, g = case.block_len, case.padded_len, case.global_len
  shape = (case.batch, case.num_heads)
  d = case.size_per_head
  pieces = {
      "q": rng.normal(size=shape + (lp, d)) / np.sqrt(d),
      "k_band": rng.normal(size=shape + (lp + 2 * b, d)),
      "v_band": rng.normal(size=shape + (lp + 2 * b, d)),
      "k_global": rng.normal(size=shape + (g, d)),
      "v_global": rng.normal(size=shape + (g, d)),
      "per_id": rng.normal(size=(case.batch, lp, case.num_ids,
                                 case.num_heads)),
  }
  pieces["ids_window"] = rng.integers(0, case.num_ids,
                                      (case.batch, lp, 2 * b - 1))
  pieces["ids_global"] = rng.integers(0, case.num_ids, (case.batch, lp, g))
  window = rng.random((case.batch, lp, 2 * b - 1)) < 0.8
  c = np.arange(3 * b)[None, :]
  j = (np.arange(lp) % b)[:, None]
  w = c - j - 1
  in_window = (w >= 0) & (w < 2 * b - 1)
  band_keep = np.zeros((case.batch, lp, 3 * b), bool)
  rows, cols = np.nonzero(in_window)
  band_keep[:, rows, cols] = window[:, rows, w[rows, cols]]
  global_keep = rng.random((case.batch, lp, g)) < 0.7
  valid = np.ones((case.batch, lp))
  if masked_rows:
    band_keep[0, -masked_rows:] = False
    global_keep[0, -masked_rows:] = False
    valid[0, -masked_rows:] = 0.0
  pieces["add_band"] = np.where(band_keep, 0.0, NEG)
  pieces["add_global"] = np.where(global_keep, 0.0, NEG)
  pieces["valid"] = valid
  pieces["codes_band"], pieces["codes_global"] = codes(
      pieces, b, case.has_ids)
  out = {}
  for name, value in pieces.items():
    if name.startswith("codes_"):
      out[name] = value
    else:
      out[name] = (value.astype(np.int32) if value.dtype.kind == "i"
                   else value.astype(np.float32))
  return out


def band_stride(block_len: int) -> int:
  """The band codes' row length: 3b rounded up to 16 bytes."""
  return -(-3 * block_len // 16) * 16


def codes(p: Dict[str, np.ndarray], block_len: int, has_ids: bool):
  """The kernels' int8 codes (-1 masked, else the relative id or 0) from
  the XLA path's adders and ids: (band <i8>[B, Lp, Wb], global
  <i8>[B, Lp, G])."""
  b = block_len
  batch, lp, _ = p["add_band"].shape
  c = np.arange(3 * b)[None, :]
  w = c - (np.arange(lp) % b)[:, None] - 1
  in_window = (w >= 0) & (w < 2 * b - 1)
  band_ids = np.zeros((batch, lp, 3 * b), np.int64)
  if has_ids:
    window_ids = np.take_along_axis(
        p["ids_window"], np.broadcast_to(np.where(in_window, w, 0),
                                         (batch, lp, 3 * b)), axis=2)
    band_ids = np.where(in_window, window_ids, 0)
  band = np.full((batch, lp, band_stride(b)), -1, np.int8)
  band[..., :3 * b] = np.where(p["add_band"] == 0, band_ids, -1)
  global_ids = p["ids_global"] if has_ids else 0
  glob = np.where(p["add_global"] == 0, global_ids, -1).astype(np.int8)
  return band, glob


def long_side_reference(p: Dict[str, np.ndarray], block_len: int,
                        has_ids: bool = True):
  """(ctx <f64>[B, H, Lp, D], lse <f64>[B, H, Lp]) of the long side."""
  f = {k: v.astype(np.float64) for k, v in p.items()}
  batch, heads, lp, _ = f["q"].shape
  b = block_len
  ctx = np.zeros_like(f["q"])
  lse = np.zeros((batch, heads, lp))
  c = np.arange(3 * b)
  for i in range(lp):
    k = i // b
    j = i - k * b
    rows = k * b + c
    w = c - j - 1
    in_window = (w >= 0) & (w < 2 * b - 1)
    for h in range(heads):
      q = f["q"][:, h, i]  # [B, D]
      band = np.einsum("bd,bkd->bk", q, f["k_band"][:, h, rows])
      band += f["add_band"][:, i]
      glob = np.einsum("bd,bgd->bg", q, f["k_global"][:, h])
      glob += f["add_global"][:, i]
      if has_ids:
        per_id = f["per_id"][:, i, :, h]  # [B, R]
        ids = p["ids_window"][:, i, np.where(in_window, w, 0)]
        picked = np.take_along_axis(per_id, ids, axis=1)
        band += np.where(in_window, picked, 0.0)
        glob += np.take_along_axis(per_id, p["ids_global"][:, i], axis=1)
      logits = np.concatenate([band, glob], axis=1)
      peak = logits.max(axis=1, keepdims=True)
      e = np.exp(logits - peak)
      total = e.sum(axis=1, keepdims=True)
      probs = e / total * f["valid"][:, i, None]
      values = np.concatenate([f["v_band"][:, h, rows], f["v_global"][:, h]],
                              axis=1)
      ctx[:, h, i] = np.einsum("bk,bkd->bd", probs, values)
      lse[:, h, i] = (peak + np.log(total))[:, 0]
  return ctx, lse


def relative_error(actual, expected, mask=None) -> float:
  """||actual - expected|| / ||expected|| over the (masked) elements."""
  actual = np.asarray(actual, np.float64)
  expected = np.asarray(expected, np.float64)
  if mask is not None:
    actual, expected = actual[mask], expected[mask]
  return float(np.linalg.norm(actual - expected) /
               max(np.linalg.norm(expected), 1e-30))
