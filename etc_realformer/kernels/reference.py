"""A float64 NumPy reference of the fused attention kernels, and random
pieces in their layouts (`triton_attention` docstring).

Written from the definitions (window ids, band columns, the RealFormer
rule, the hash dropout's element index), not from the kernels' tiling. It
reads the XLA path's forms of masks and ids (adders, window ids), so the
kernels' int8 codes (`format`) are checked against them too. NumPy and
`format` alone: the tests load it through the package, the GPU check
(`tools/gpu/gpu_kernel_check.py`) without it, on a machine without
TensorFlow.

A branch has two patterns that share one softmax (`attention.core`): the
first is the l2l band (`band`: padded key blocks, 3b band columns per
query) or dense (g2g, or l2l on the full path), the second dense (l2g,
g2l).
"""

import dataclasses
from typing import Dict, Optional, Tuple

import numpy as np

from etc_realformer.kernels.format import MASKED
from etc_realformer.kernels.format import NO_ID
from etc_realformer.kernels.format import band_stride

# The XLA path's mask adder (the kernels' codes: `format`).
NEG = -10000.0


@dataclasses.dataclass
class BranchCase:
  """Sizes and options of one branch's problem.

  Attributes:
    band: the first pattern is the l2l band (N = num_blocks * block_len
      queries, 3b columns each); else dense over `first_len` keys
      (N = num_rows).
    second_len: the second pattern's keys (G on the long branch, L on the
      global branch).
    carried: per pattern, whether RealFormer carries its scores.
    has_prev: the carried patterns have a previous stream to read (layer
      index > 0).
    emit: write the new running sums of the carried patterns.
    num_summed, running_mean: `attention.core.StreamSpec`'s.
    dropout_rate: > 0: the probabilities' hash dropout (training).
    by_rows: the dropout index is laid out rows first
      (`dropout.row_keep_mask`, row blocks of `row_block` queries); else
      row-major over [B, H, N, K].
    num_sources: > 0: recomputed streams; the previous sums read are
      those of `num_sources` earlier layers' queries and keys
      (`source_sums`), which the kernels get instead of the sums.
  """
  batch: int = 2
  num_heads: int = 2
  size_per_head: int = 16
  has_ids: bool = True
  num_ids: int = 7
  band: bool = True
  num_blocks: int = 6
  block_len: int = 24
  num_rows: int = 0
  first_len: int = 0
  second_len: int = 80
  carried: Tuple[bool, bool] = (False, False)
  has_prev: bool = True
  emit: bool = True
  num_summed: int = 3
  running_mean: bool = False
  dropout_rate: float = 0.0
  by_rows: bool = True
  num_sources: int = 0

  @property
  def rows(self) -> int:
    """N: the branch's queries (Lp on the band branch)."""
    return self.num_blocks * self.block_len if self.band else self.num_rows

  @property
  def padded_len(self) -> int:
    return self.rows

  @property
  def global_len(self) -> int:
    return self.second_len

  @property
  def widths(self) -> Tuple[int, int]:
    """Score columns per query of each pattern (3b on the band)."""
    return (3 * self.block_len if self.band else self.first_len,
            self.second_len)

  @property
  def row_block(self) -> int:
    """Queries per row of the dropout index (b on the band branch)."""
    return self.block_len if self.band else 1

  @property
  def reads_prev(self) -> Tuple[bool, bool]:
    return tuple(c and self.has_prev for c in self.carried)

  @property
  def writes_new(self) -> Tuple[bool, bool]:
    return tuple(c and self.emit for c in self.carried)

  @property
  def scales(self) -> Tuple[float, float]:
    """What multiplies a carried pattern's running sum into its logits."""
    mean = 1.0 / self.num_summed if (self.running_mean and
                                     self.num_summed > 1) else 1.0
    return tuple(mean if c else 1.0 for c in self.carried)

  @classmethod
  def long_branch(cls, global_len: int = 80, **kwargs) -> "BranchCase":
    """The long branch on the sparse path (band + G global keys)."""
    return cls(band=True, second_len=global_len, **kwargs)

  @classmethod
  def global_branch(cls, global_len: int = 24, long_len: int = 90,
                    **kwargs) -> "BranchCase":
    """The global branch: G queries over G global keys and L long keys."""
    return cls(band=False, num_rows=global_len, first_len=global_len,
               second_len=long_len, **kwargs)


def _band_window(block_len: int, rows: int):
  """Per (query, band column): the window offset w and whether the column
  lies in the query's window of 2b - 1 keys ([N, 3b] each)."""
  b = block_len
  c = np.arange(3 * b)[None, :]
  w = c - (np.arange(rows) % b)[:, None] - 1
  return w, (w >= 0) & (w < 2 * b - 1)


# ------------------------------------------------------------------ pieces
def branch_pieces(case: BranchCase, seed: int = 0,
                  masked_rows: int = 3) -> Dict[str, np.ndarray]:
  """Random float32 pieces of a branch in the kernels' layouts
  (`triton_attention` docstring), and the XLA path's forms of the masks.

  Masks: random hard masks on both patterns (band: -10000 outside the
  window too, as `blocking.window_to_blocked` leaves them), and the last
  `masked_rows` queries of batch 0 fully masked (valid 0). The XLA path's
  forms (`ids1` window ids [B, N, 2b - 1] on the band or [B, N, K1],
  `ids2`, `add1` [B, N, C1], `add2`) are what the reference reads; the
  codes are the kernels'. Carried patterns get previous streams
  (`prev1`, `prev2` [B, H, N, C]), or with `num_sources` the sources
  (`src_q`, `src_k1`, `src_k2`; the sums the reference reads are then
  `source_sums`', made once the sources are rounded as the kernels read
  them); with dropout, `seeds` <int32>[4] (two folded seeds), as the graph
  makes them.
  """
  rng = np.random.default_rng(seed)
  n, d = case.rows, case.size_per_head
  shape = (case.batch, case.num_heads)
  k1_rows = n + 2 * case.block_len if case.band else case.first_len
  c1, c2 = case.widths
  p = {
      "q": rng.normal(size=shape + (n, d)) / np.sqrt(d),
      "k1": rng.normal(size=shape + (k1_rows, d)),
      "v1": rng.normal(size=shape + (k1_rows, d)),
      "k2": rng.normal(size=shape + (case.second_len, d)),
      "v2": rng.normal(size=shape + (case.second_len, d)),
      "per_id": rng.normal(size=(case.batch, n, case.num_ids,
                                 case.num_heads)),
  }
  if case.band:
    b = case.block_len
    p["ids1"] = rng.integers(0, case.num_ids, (case.batch, n, 2 * b - 1))
    window = rng.random((case.batch, n, 2 * b - 1)) < 0.8
    w, in_window = _band_window(b, n)
    keep1 = np.zeros((case.batch, n, 3 * b), bool)
    rows, cols = np.nonzero(in_window)
    keep1[:, rows, cols] = window[:, rows, w[rows, cols]]
  else:
    p["ids1"] = rng.integers(0, case.num_ids, (case.batch, n, c1))
    keep1 = rng.random((case.batch, n, c1)) < 0.8
  p["ids2"] = rng.integers(0, case.num_ids, (case.batch, n, c2))
  keep2 = rng.random((case.batch, n, c2)) < 0.7
  valid = np.ones((case.batch, n))
  if masked_rows:
    keep1[0, -masked_rows:] = False
    keep2[0, -masked_rows:] = False
    valid[0, -masked_rows:] = 0.0
  p["add1"] = np.where(keep1, 0.0, NEG)
  p["add2"] = np.where(keep2, 0.0, NEG)
  p["valid"] = valid
  if case.num_sources:
    j = case.num_sources * d
    p["src_q"] = rng.normal(size=shape + (n, j)) / np.sqrt(d)
    p["src_k1"] = rng.normal(size=shape + (k1_rows, j))
    p["src_k2"] = rng.normal(size=shape + (case.second_len, j))
  else:
    for index, width in enumerate((c1, c2)):
      if case.reads_prev[index]:
        p[f"prev{index + 1}"] = 3.0 * rng.normal(size=shape + (n, width))
  out = {}
  for name, value in p.items():
    out[name] = (value.astype(np.int32) if value.dtype.kind == "i"
                 else value.astype(np.float32))
  out["codes1"], out["codes2"] = codes(out, case)
  if case.dropout_rate > 0:
    out["seeds"] = rng.integers(-2**31, 2**31 - 1, 4).astype(np.int32)
  return out


def source_sums(p: Dict[str, np.ndarray], case: BranchCase
                ) -> Dict[str, np.ndarray]:
  """With recomputed streams (`case.num_sources`), the previous sums the
  read patterns see: sum_j q_j.k_j of the sources `src_q`, `src_k1`,
  `src_k2` ([.., J * D], layers side by side), as float32 `prev1`,
  `prev2` (what the reference reads; the kernels make them per tile).
  Call it again after rounding the sources."""
  out = {}
  if not case.num_sources:
    return out
  q = p["src_q"].astype(np.float64)
  keys = (_gathered(case, p, "src_k1"),
          p["src_k2"].astype(np.float64)[:, :, None])
  for index in range(2):
    if case.reads_prev[index]:
      k = np.broadcast_to(keys[index], keys[index].shape[:2] + (case.rows,)
                          + keys[index].shape[3:])
      out[f"prev{index + 1}"] = np.einsum("bhnd,bhnkd->bhnk", q, k).astype(
          np.float32)
  return out


def codes(p: Dict[str, np.ndarray], case: BranchCase
          ) -> Tuple[np.ndarray, np.ndarray]:
  """The kernels' int8 codes (module constants) from the XLA path's adders
  and ids: (first <i8>[B, N, W1] (band: rows padded with NO_ID to
  `band_stride` bytes), second <i8>[B, N, K2])."""
  ids1, ids2 = relative_ids(p, case)
  out = []
  for ids, adder in ((ids1, p["add1"]), (ids2, p["add2"])):
    unmasked = np.where(ids < 0, 0, ids)
    masked = np.where(ids < 0, NO_ID, MASKED + ids)
    out.append(np.where(adder == 0, unmasked, masked).astype(np.int8))
  first = out[0]
  if case.band:
    b = case.block_len
    first = np.full(first.shape[:2] + (band_stride(b),), NO_ID, np.int8)
    first[..., :3 * b] = out[0]
  return first, out[1]


def relative_ids(p: Dict[str, np.ndarray], case: BranchCase
                 ) -> Tuple[np.ndarray, np.ndarray]:
  """Per pattern, every score's relative id in the score layout ([B, N, C];
  -1 where the score has no relative term: no ids, or a band column
  outside the window)."""
  n = case.rows
  c1, c2 = case.widths
  if not case.has_ids:
    return (np.full((case.batch, n, c1), -1), np.full((case.batch, n, c2),
                                                      -1))
  if case.band:
    w, in_window = _band_window(case.block_len, n)
    picked = np.take_along_axis(
        p["ids1"], np.broadcast_to(np.where(in_window, w, 0),
                                   (case.batch, n, c1)), axis=2)
    ids1 = np.where(in_window, picked, -1)
  else:
    ids1 = p["ids1"].astype(np.int64)
  return ids1, p["ids2"].astype(np.int64)


# ------------------------------------------------------------------ hashing
_MASK32 = np.uint64(0xFFFFFFFF)


def _mix32(x: np.ndarray) -> np.ndarray:
  """`dropout._mix32` on uint64 arrays holding 32-bit values."""
  x = x ^ (x >> np.uint64(16))
  x = (x * np.uint64(0x21F0AAAD)) & _MASK32
  x = x ^ (x >> np.uint64(15))
  x = (x * np.uint64(0xD35A2D97)) & _MASK32
  return x ^ (x >> np.uint64(15))


def dropout_index(case: BranchCase, width: int) -> np.ndarray:
  """<uint64>[B, H, N, C]: each row's position in the whole tensor's
  dropout layout (`dropout.row_major_index`) times C, plus the column,
  modulo 2^32: rows first in row blocks ([N / RB, B, H, RB, C]) with
  `by_rows`, else [B, H, N, C]. The hash's index (`dropout_pairs`) is this
  layout's over the columns' pairs."""
  bsz, h, n = case.batch, case.num_heads, case.rows
  bi = np.arange(bsz)[:, None, None, None]
  hi = np.arange(h)[None, :, None, None]
  i = np.arange(n)[None, None, :, None]
  c = np.arange(width)[None, None, None, :]
  if case.by_rows:
    rb = case.row_block
    index = ((((i // rb) * bsz + bi) * h + hi) * rb + i % rb) * width + c
  else:
    index = ((bi * h + hi) * n + i) * width + c
  return index.astype(np.uint64) & _MASK32


def dropout_pairs(case: BranchCase, pattern: int, width: int
                  ) -> Tuple[np.ndarray, np.ndarray]:
  """(<uint64>[B, H, N, C] index, <bool>[B, H, N, C] low): the hash
  dropout's index of each probability and whether the low half of its
  hash decides it (`dropout.hash_pairs`): columns pair up in a layout of
  C // 2 + 1 pairs a row; on the band (pattern 0 with `band`) by key, so
  row block k's pairs start one column late when k * b is odd."""
  pairs = width // 2 + 1
  rows = dropout_index(case, 1)  # each row's position
  u = np.arange(width)[None, None, None, :]
  if case.band and pattern == 0:
    k = np.arange(case.rows) // case.block_len
    u = u + ((k * case.block_len) % 2)[None, None, :, None]
  index = rows * np.uint64(pairs) + (u // 2).astype(np.uint64)
  low = np.broadcast_to(u % 2 == 1, index.shape)
  return index & _MASK32, low


def keep_mask(case: BranchCase, seeds: np.ndarray, pattern: int,
              width: int) -> np.ndarray:
  """<bool>[B, H, N, C]: the hash dropout's keep decisions of a pattern
  (`dropout.row_keep_mask` with rng='hash'; seeds[2p:2p+2] the folded
  seed of pattern p)."""
  key = seeds[2 * pattern:2 * pattern + 2].view(np.uint32).astype(np.uint64)
  index, low = dropout_pairs(case, pattern, width)
  bits = _mix32(_mix32((index + key[0]) & _MASK32) ^ key[1])
  half = np.where(low, bits & np.uint64(0xFFFF), bits >> np.uint64(16))
  return half >= keep_threshold(case.dropout_rate)


def keep_threshold(rate: float) -> int:
  """`dropout.keep_threshold`."""
  return int(round(rate * 65536))


def keep_gain(rate: float) -> float:
  """`dropout.keep_gain` (in training)."""
  return 1.0 if rate == 0 else 1.0 / (1.0 - keep_threshold(rate) / 65536.0)


# --------------------------------------------------------------- reference
def _gathered(case: BranchCase, p: Dict[str, np.ndarray], name: str
              ) -> np.ndarray:
  """The first pattern's keys or values per query: [B, H, N, C1, D]."""
  x = p[name].astype(np.float64)
  if not case.band:
    n = case.rows
    return np.broadcast_to(x[:, :, None], x.shape[:2] + (n,) + x.shape[2:])
  b = case.block_len
  rows = (np.arange(case.rows) // b * b)[:, None] + np.arange(3 * b)[None]
  return x[:, :, rows]


@dataclasses.dataclass
class BranchForward:
  """The reference's forward values (float64)."""
  ctx: np.ndarray             # [B, H, N, D]
  lse: np.ndarray             # [B, H, N]
  new: Tuple[Optional[np.ndarray], Optional[np.ndarray]]  # running sums
  probs: Tuple[np.ndarray, np.ndarray]  # valid-scaled, before dropout
  dropped: Tuple[np.ndarray, np.ndarray]  # after dropout (with its gain)


def branch_forward(p: Dict[str, np.ndarray], case: BranchCase) -> BranchForward:
  """One branch's forward pass, as `attention.core.attend_branch` defines it."""
  f = {k: v.astype(np.float64) for k, v in p.items()
       if v.dtype.kind == "f"}
  ids = relative_ids(p, case)
  keys = (_gathered(case, p, "k1"), f["k2"][:, :, None])
  totals, logits = [], []
  for index in range(2):
    s = np.einsum("bhnd,bhnkd->bhnk", f["q"], np.broadcast_to(
        keys[index], keys[index].shape[:2] + (case.rows,) +
        keys[index].shape[3:]))
    rel = np.stack([np.take_along_axis(f["per_id"][..., h],
                                       np.maximum(ids[index], 0), axis=2)
                    for h in range(case.num_heads)], axis=1)
    s = s + np.where(ids[index][:, None] >= 0, rel, 0.0)
    if case.carried[index]:
      total = s + (f[f"prev{index + 1}"] if case.reads_prev[index] else 0.0)
      logit = total * case.scales[index]
    else:
      total, logit = None, s
    totals.append(total)
    logits.append(logit + f[f"add{index + 1}"][:, None])
  peak = np.maximum(logits[0].max(-1), logits[1].max(-1))[..., None]
  exps = [np.exp(x - peak) for x in logits]
  total_exp = exps[0].sum(-1) + exps[1].sum(-1)
  valid = f["valid"][:, None, :, None]
  probs = tuple(e / total_exp[..., None] * valid for e in exps)
  dropped = list(probs)
  if case.dropout_rate > 0:
    gain = keep_gain(case.dropout_rate)
    for index, width in enumerate(case.widths):
      keep = keep_mask(case, p["seeds"], index, width)
      dropped[index] = np.where(keep, probs[index] * gain, 0.0)
  values = (_gathered(case, p, "v1"), f["v2"][:, :, None])
  ctx = sum(np.einsum("bhnk,bhnkd->bhnd", dropped[i], np.broadcast_to(
      values[i], values[i].shape[:2] + (case.rows,) + values[i].shape[3:]))
            for i in range(2))
  new = tuple(t if w else None for t, w in zip(totals, case.writes_new))
  return BranchForward(ctx=ctx, lse=peak[..., 0] + np.log(total_exp), new=new,
                       probs=probs, dropped=tuple(dropped))


def relative_error(actual, expected, mask=None) -> float:
  """||actual - expected|| / ||expected|| over the (masked) elements."""
  actual = np.asarray(actual, np.float64)
  expected = np.asarray(expected, np.float64)
  if mask is not None:
    actual, expected = actual[mask], expected[mask]
  return float(np.linalg.norm(actual - expected) /
               max(np.linalg.norm(expected), 1e-30))


@dataclasses.dataclass
class BranchGradients:
  """The reference's gradients (float64) of one branch's inputs."""
  q: np.ndarray                # [B, H, N, D]
  k1: np.ndarray               # k1's shape (band: padded rows)
  v1: np.ndarray
  k2: np.ndarray               # [B, H, K2, D]
  v2: np.ndarray
  per_id: np.ndarray           # [B, N, R, H]
  prev: Tuple[Optional[np.ndarray], Optional[np.ndarray]]  # read sums


def branch_backward(p: Dict[str, np.ndarray], case: BranchCase,
                    fwd: BranchForward, dctx: np.ndarray,
                    dnew: Tuple[Optional[np.ndarray], Optional[np.ndarray]]
                    ) -> BranchGradients:
  """The gradients of `branch_forward`'s inputs, given the gradients of its
  context and of the emitted running sums (None: not emitted).

  Per score: dP = dctx.v (through dropout's mask and gain); the softmax's
  dlogit = P (dP - sum_row P dP); a carried pattern's running sum gets
  dlogit * scale + its own incoming gradient, which is the gradient of the
  score, of the relative term and of the previous sum alike.
  """
  f = {k: v.astype(np.float64) for k, v in p.items()
       if v.dtype.kind == "f"}
  dctx = dctx.astype(np.float64)
  gain = keep_gain(case.dropout_rate)
  values = (_gathered(case, p, "v1"), f["v2"][:, :, None])
  keys = (_gathered(case, p, "k1"), f["k2"][:, :, None])
  dps, dvs = [], []
  for index in range(2):
    v = np.broadcast_to(values[index], values[index].shape[:2] +
                        (case.rows,) + values[index].shape[3:])
    dp = np.einsum("bhnd,bhnkd->bhnk", dctx, v)
    if case.dropout_rate > 0:
      keep = keep_mask(case, p["seeds"], index, case.widths[index])
      dp = np.where(keep, dp * gain, 0.0)
    dps.append(dp)
    dvs.append(np.einsum("bhnk,bhnd->bhnkd", fwd.dropped[index], dctx))
  delta = sum((fwd.probs[i] * dps[i]).sum(-1, keepdims=True)
              for i in range(2))
  ids = relative_ids(p, case)
  dq = np.zeros_like(f["q"])
  dper_id = np.zeros_like(f["per_id"])
  dkeys, dprev = [], []
  for index in range(2):
    dscore = fwd.probs[index] * (dps[index] - delta)
    if case.carried[index]:
      dscore = dscore * case.scales[index]
      if dnew[index] is not None:
        dscore = dscore + dnew[index]
    dprev.append(dscore if case.reads_prev[index] else None)
    k = np.broadcast_to(keys[index], keys[index].shape[:2] + (case.rows,) +
                        keys[index].shape[3:])
    dq += np.einsum("bhnk,bhnkd->bhnd", dscore, k)
    dkeys.append(np.einsum("bhnk,bhnd->bhnkd", dscore, f["q"]))
    has = ids[index] >= 0  # [B, N, C]
    bi, ni, ci = np.nonzero(has)
    for h in range(case.num_heads):
      np.add.at(dper_id[..., h], (bi, ni, ids[index][bi, ni, ci]),
                dscore[bi, h, ni, ci])
  # Per-query keys and values back to their rows.
  grads = []
  for index, name in ((0, "k1"), (0, "v1"), (1, "k2"), (1, "v2")):
    gathered = (dkeys if name.startswith("k") else dvs)[index]
    out = np.zeros_like(f[name])
    if index == 0 and case.band:
      b = case.block_len
      rows = ((np.arange(case.rows) // b * b)[:, None] +
              np.arange(3 * b)[None])
      np.add.at(out, (slice(None), slice(None), rows), gathered)
    else:
      out += gathered.sum(axis=2)
    grads.append(out)
  return BranchGradients(q=dq, k1=grads[0], v1=grads[1], k2=grads[2],
                         v2=grads[3], per_id=dper_id, prev=tuple(dprev))
