"""Triton kernels of the fused global-local attention core, per query side.

The long side's forward pass: for each query i of the blocked band layout
(`docs/design.md`, "The four patterns and their layouts"; b = r + 1, query
block k = i // b) one softmax over

  l2l  the band: padded key rows k*b .. k*b + 3b - 1 (blocks k-1, k, k+1;
       `blocking.padded_blocks`), band column c = row - k*b
  l2g  the G global keys

with scores q.k (q pre-scaled) + the relative score per_id[i, id] (the
unmasked keys) or -10000 (the masked ones), and the context sum_p P_p.V_p,
all on chip:
scores, relative terms, masks and the softmax's statistics never leave the
kernel. The relative scores of a tile's queries for every id ([BM, R], R
about 32) are loaded once and picked per key in registers (`tl.gather`),
not read per key from memory. It writes the context and the row statistic lse = max + log(sum)
(float32) that a backward pass recomputes the probabilities from.

Masks and relative ids come as one int8 code per (query, key): -1 where
the key is masked, else its relative id (0 without relative ids), in the
band layout for l2l (column c of query i is padded key row k*b + c) and
[Lp, G] for l2g (`fused_attention.attention_codes`): a byte per score where
the XLA path reads a float32 adder and an int32 id. A masked key's score is
q.k - 10000, as the XLA path's q.k + rel - 10000 rounds to the same
probability (zero, in float32, beside any unmasked key; a query without an
unmasked key is not valid and gets zeros).

This module imports Triton alone (no TensorFlow, no package import), so the
build tool loads it by path on a machine that has only Triton
(`tools/build_kernels.py`), and the tests run it under Triton's interpreter
(`TRITON_INTERPRET=1`, set before this module is imported).

Layouts (all contiguous; T is float32, bfloat16 or float16):

  q          <T>[B, H, Lp, D]        pre-scaled queries, Lp = nb * b
  k_band     <T>[B, H, Lp + 2b, D]   padded key blocks; v_band the same
  k_global   <T>[B, H, G, D]         global keys; v_global the same
  per_id     <f32>[B, Lp, R, H]      relative scores per id (the layout
                                     `relative_table.scores_per_id` makes)
  codes_band <i8>[B, Lp, Wb]         l2l codes, band layout; Wb >= 3b (rows
                                     padded to 16 bytes)
  codes_global <i8>[B, Lp, G]        l2g codes
  valid      <f32>[B, Lp]            1 where the query has a key, else 0
  ctx        <T>[B, H, Lp, D]        the context (0 where not valid)
  lse        <f32>[B, H, Lp]         max + log(sum) of the row's exponentials
"""

import os

import triton
import triton.language as tl

# Query rows and key columns per tile. D must be a power of two >= 16
# (`tl.dot`); b (the block length) is free: tiles are laid over absolute
# rows, so a tile of BLOCK_M queries reads the key rows of every band it
# touches, not one query block padded to a power of two.
BLOCK_M = 64
BLOCK_N = 64
NUM_WARPS = 4
NUM_STAGES = 2
# Measured on an H200 (docs/benchmarks.md, "Fused kernels"): loading each
# relative score from its row (cached) beat `tl.gather` from registers.
PICK_IN_REGISTERS = False

# Triton 3.9's interpreter multiplies bfloat16 operands of `tl.dot` wrongly
# (errors of 1e10 on unit-scale inputs; float16 and float32 are right), so
# interpreted kernels upcast the operands first: the same products (bfloat16
# products are exact in float32) summed in float32, as the tensor cores do.
UPCAST_DOTS = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")


@triton.jit
def _scores(qt, kt, IEEE: tl.constexpr):
  """q [BM, D] . k [BN, D]^T in float32 (IEEE float32 for float32 inputs:
  Triton's default for them is TF32)."""
  if IEEE:
    s = tl.dot(qt, tl.trans(kt), input_precision="ieee")
  elif UPCAST_DOTS:
    s = tl.dot(qt.to(tl.float32), tl.trans(kt).to(tl.float32),
               input_precision="ieee")
  else:
    s = tl.dot(qt, tl.trans(kt))
  return s


@triton.jit
def _context(p, vt, IEEE: tl.constexpr):
  """p [BM, BN] (float32) . v [BN, D] in float32; p rounded to v's dtype
  first, as the XLA path's context product reads it."""
  if IEEE:
    c = tl.dot(p, vt, input_precision="ieee")
  elif UPCAST_DOTS:
    c = tl.dot(p.to(vt.dtype).to(tl.float32), vt.to(tl.float32),
               input_precision="ieee")
  else:
    c = tl.dot(p.to(vt.dtype), vt)
  return c


@triton.jit
def _pick(table, per_id, id_rows, num_ids, num_heads, head, rel_id, ok,
          PICK_IN_REGISTERS: tl.constexpr):
  """per_id[row, rel_id, head] where `ok`, else 0: [BM, BN] (`id_rows`:
  the rows' indices in per_id's [B * Lp] rows)."""
  if PICK_IN_REGISTERS:
    picked = tl.where(ok, tl.gather(table, rel_id, axis=1), 0.0)
  else:
    picked = tl.load(per_id + (id_rows[:, None] * num_ids + rel_id) * num_heads
                     + head, mask=ok, other=0.0)
  return picked


@triton.jit
def _online_softmax(s, vt, m_i, l_i, acc, IEEE: tl.constexpr):
  """One key tile into the running softmax: logits s [BM, BN], values
  [BN, D]; returns the new (max, sum, context) of each row."""
  m_new = tl.maximum(m_i, tl.max(s, 1))
  alpha = tl.exp(m_i - m_new)
  p = tl.exp(s - m_new[:, None])
  l_i = l_i * alpha + tl.sum(p, 1)
  acc = acc * alpha[:, None] + _context(p, vt, IEEE)
  return m_new, l_i, acc


@triton.jit
def _masked(s, code, present, table, per_id, flat_rows, num_ids, num_heads,
            head, HAS_IDS: tl.constexpr, PICK_IN_REGISTERS: tl.constexpr):
  """The logits of a [BM, BN] tile: s + the relative score where the code
  is an id, s - 10000 where it is -1 (masked), -inf where the key is not
  the query's (`present` false: outside its band, or past the end)."""
  keep = code >= 0
  if HAS_IDS:
    s += _pick(table, per_id, flat_rows, num_ids, num_heads, head,
               tl.maximum(code, 0), present & keep, PICK_IN_REGISTERS)
  s = tl.where(keep, s, s - 10000.0)
  return tl.where(present, s, float("-inf"))


@triton.jit
def long_side_forward(q, k_band, v_band, k_global, v_global, per_id,
                      codes_band, codes_global, valid,
                      ctx, lse, num_heads, padded_len, global_len,
                      num_ids, block_len, band_stride,
                      D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                      R: tl.constexpr, HAS_IDS: tl.constexpr,
                      IEEE: tl.constexpr, PICK_IN_REGISTERS: tl.constexpr):
  """One program: BM query rows of one (batch, head); grid
  (cdiv(Lp, BM), B * H). R: num_ids rounded up to a power of two.
  PICK_IN_REGISTERS: pick the relative scores from the tile's [BM, R] table
  with `tl.gather`; else load each from per_id's row (a cached read of the
  row's R values)."""
  pid_m = tl.program_id(0)
  bh = tl.program_id(1)
  batch = bh // num_heads
  head = bh % num_heads
  band_width = 3 * block_len
  rows = pid_m * BM + tl.arange(0, BM)
  row_ok = rows < padded_len
  d = tl.arange(0, D)
  # Offsets in int32 (64-bit index math on every [BM, BN] element costs
  # time): the handlers refuse operands of 2^31 elements or more.
  flat_rows = batch * padded_len + rows
  head_rows = bh * padded_len
  qt = tl.load(q + (head_rows + rows)[:, None] * D + d[None, :],
               mask=row_ok[:, None], other=0.0)
  band_start = (rows // block_len) * block_len  # first padded key row
  if HAS_IDS and PICK_IN_REGISTERS:  # The tile's scores per id: [BM, R].
    r = tl.arange(0, R)
    table = tl.load(per_id + (flat_rows[:, None] * num_ids + r[None, :])
                    * num_heads + head,
                    mask=row_ok[:, None] & (r[None, :] < num_ids), other=0.0)
  else:
    table = tl.zeros([BM, R], tl.float32)  # unused

  m_i = tl.full([BM], -1e30, tl.float32)  # finite: exp(-inf - -inf) is NaN
  l_i = tl.zeros([BM], tl.float32)
  acc = tl.zeros([BM, D], tl.float32)

  # l2l: the key rows of every band this tile touches.
  last_row = tl.minimum(pid_m * BM + BM, padded_len) - 1
  first_key = ((pid_m * BM) // block_len) * block_len
  stop_key = (last_row // block_len) * block_len + band_width
  band_rows = bh * (padded_len + 2 * block_len)
  for n0 in range(first_key, stop_key, BN):
    keys = n0 + tl.arange(0, BN)
    key_ok = keys < stop_key
    c = keys[None, :] - band_start[:, None]
    in_band = (c >= 0) & (c < band_width) & row_ok[:, None] & key_ok[None, :]
    kt = tl.load(k_band + (band_rows + keys)[:, None] * D + d[None, :],
                 mask=key_ok[:, None], other=0.0)
    s = _scores(qt, kt, IEEE)
    code = tl.load(codes_band + flat_rows[:, None] * band_stride + c,
                   mask=in_band, other=-1).to(tl.int32)
    s = _masked(s, code, in_band, table, per_id, flat_rows, num_ids,
                num_heads, head, HAS_IDS, PICK_IN_REGISTERS)
    vt = tl.load(v_band + (band_rows + keys)[:, None] * D + d[None, :],
                 mask=key_ok[:, None], other=0.0)
    m_i, l_i, acc = _online_softmax(s, vt, m_i, l_i, acc, IEEE)

  # l2g: every global key.
  global_rows = bh * global_len
  for g0 in range(0, global_len, BN):
    keys = g0 + tl.arange(0, BN)
    key_ok = keys < global_len
    cell_ok = row_ok[:, None] & key_ok[None, :]
    kt = tl.load(k_global + (global_rows + keys)[:, None] * D + d[None, :],
                 mask=key_ok[:, None], other=0.0)
    s = _scores(qt, kt, IEEE)
    code = tl.load(codes_global + flat_rows[:, None] * global_len
                   + keys[None, :], mask=cell_ok, other=-1).to(tl.int32)
    s = _masked(s, code, cell_ok, table, per_id, flat_rows, num_ids,
                num_heads, head, HAS_IDS, PICK_IN_REGISTERS)
    vt = tl.load(v_global + (global_rows + keys)[:, None] * D + d[None, :],
                 mask=key_ok[:, None], other=0.0)
    m_i, l_i, acc = _online_softmax(s, vt, m_i, l_i, acc, IEEE)

  row_valid = tl.load(valid + flat_rows, mask=row_ok, other=0.0)
  l_i = tl.where(row_ok, l_i, 1.0)  # rows past Lp (not stored) summed 0
  out = acc * (row_valid / l_i)[:, None]
  tl.store(ctx + (head_rows + rows)[:, None] * D + d[None, :],
           out.to(ctx.dtype.element_ty), mask=row_ok[:, None])
  tl.store(lse + head_rows + rows, m_i + tl.log(l_i), mask=row_ok)


def long_side_grid(batch: int, num_heads: int, padded_len: int):
  """The launch grid of `long_side_forward`."""
  return (triton.cdiv(padded_len, BLOCK_M), batch * num_heads, 1)
