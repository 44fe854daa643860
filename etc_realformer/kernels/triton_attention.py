"""Triton kernels of the fused global-local attention core, per query branch.

A branch's forward pass (`branch_forward`): for each query i one softmax over
its two patterns' keys (`attention.core`, "The four patterns"):

  first   BAND: the l2l band, padded key rows k*b .. k*b + 3b - 1 (blocks
          k-1, k, k+1 of query block k = i // b; `blocking.padded_blocks`),
          band column c = row - k*b; else dense over K1 keys (g2g, or l2l
          on the full path)
  second  dense over K2 keys (l2g: the G global keys; g2l: the L long keys)

with, per score, q.k (q pre-scaled) + the relative score per_id[i, id];
RealFormer's rule on the carried patterns (the previous layers' running
sum added, the new sum written out, the logit scaled for the running
mean); -10000 on the masked keys; one online softmax (float32 statistics);
the probabilities' hash dropout (`dropout.row_keep_mask`, rng='hash': the
same keep decisions as the XLA path); and the context sum_p P_p.V_p. Scores,
relative terms, masks, softmax statistics and dropout decisions never
leave the kernel; it writes the context, the row statistic
lse = max + log(sum) (float32, what a backward pass recomputes the
probabilities from) and, for the carried patterns it emits, the new
running sums.

Masks and relative ids come as one int8 code per score (`reference.codes`):
the key's relative id in the low 7 bits (0 without ids), the sign bit set
where the key is masked, and NO_ID (-1: id 127, masked) a masked key
without a relative term, which only the band has (its columns outside the
window): a byte per score where the XLA path reads a float32 adder and an
int32 id, and a masked score keeps its relative term, so the running sums
equal the XLA path's everywhere. The id is one AND of the code, and only
the band's loads of the per-id score test for NO_ID.

This module imports Triton and `format` alone (no TensorFlow), so the build
(`build`) imports it without the package on a machine that has only Triton
(`tools/kernels/build_kernels.py`), and the tests run it under Triton's
interpreter (`TRITON_INTERPRET=1`, set before this module is imported).

Layouts (all contiguous; T is float32, bfloat16 or float16; S, the running
sums', float32 or T):

  q        <T>[B, H, N, D]      pre-scaled queries (band: N = Lp = nb * b)
  k1, v1   <T>[B, H, N + 2b, D] band: padded key blocks
           <T>[B, H, K1, D]     dense
  k2, v2   <T>[B, H, K2, D]
  per_id   <f32>[B, N, R, H]    relative scores per id (the layout
                                `relative_table.scores_per_id` makes)
  codes1   <i8>[B, N, W1]       band: W1 >= 3b (rows padded to 16 bytes);
                                dense: W1 = K1
  codes2   <i8>[B, N, K2]
  valid    <f32>[B, N]          1 where the query has a key, else 0
  prev1    <S>[B, H, N, C1]     the previous running sum (C1 = 3b or K1)
  prev2    <S>[B, H, N, K2]
  src_q    <T>[B, H, N, J*D]    SOURCES (recomputed streams): the J earlier
  src_k1   <T>[B, H, K1', J*D]  layers' queries and keys, concatenated along
  src_k2   <T>[B, H, K2, J*D]   the head size; the previous sum of a read
                                pattern is then sum_j q_j.k_j, made per
                                tile (prev unread)
  seeds    <i32>[4]             the folded dropout seed of each pattern
  ctx      <T>[B, H, N, D]      the context (0 where not valid)
  lse      <f32>[B, H, N]       max + log(sum) of the row's exponentials
  new1     <S>[B, H, N, C1]     the new running sums (emitted patterns)
  new2     <S>[B, H, N, K2]
"""

import os

import triton
import triton.language as tl

from etc_realformer.kernels import format as kernel_format

# Per kernel: query rows (block_m) and keys (block_n) per tile, warps and
# pipeline stages (`tools/kernels/build_kernels.py` compiles with them; its
# flags override them). D must be a power of two >= 16 (`tl.dot`); b (the block
# length) is free: tiles are laid over absolute rows, so a tile of block_m
# queries reads the key rows of every band it touches, not one query block
# padded to a power of two. Chosen so that no kernel spills registers at D = 64
# on sm_90 with streams and dropout (`cuobjdump -res-usage` of the bfloat16
# cubins: at most 230, 238 and 221 registers, no stack), where 64 x 64 tiles of
# 4 warps spilled 216 (forward) to 416 (backward queries) bytes per thread;
# closest to the 32 x 64 of 4 warps that timed best (within noise) for the long
# branch's first forward kernel (docs/kernels.md).
TILES = {
    "branch_forward": dict(block_m=32, block_n=64, num_warps=4, num_stages=2),
    "branch_backward_queries": dict(block_m=32, block_n=32, num_warps=4,
                                    num_stages=2),
    "branch_backward_keys": dict(block_m=32, block_n=64, num_warps=4,
                                 num_stages=2),
}
# The code of a masked score without a relative term (the band's only).
NO_ID = tl.constexpr(kernel_format.NO_ID)

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
def _source_scores(src_q, src_k, head_rows, row_ok, key_rows, key_ok,
                   num_sources, D: tl.constexpr, BM: tl.constexpr,
                   BN: tl.constexpr, IEEE: tl.constexpr):
  """sum_j q_j . k_j^T of a [BM, BN] tile over the J earlier layers
  (recomputed streams): their queries and keys side by side along the
  head size, [.., J * D], one [BM, D] and one [BN, D] slice per layer."""
  d = tl.arange(0, D)
  width = num_sources * D
  s = tl.zeros([BM, BN], tl.float32)
  for j in range(num_sources):
    qj = tl.load(src_q + head_rows[:, None] * width + j * D + d[None, :],
                 mask=row_ok[:, None], other=0.0)
    kj = tl.load(src_k + key_rows[:, None] * width + j * D + d[None, :],
                 mask=key_ok[:, None], other=0.0)
    s += _scores(qj, kj, IEEE)
  return s


@triton.jit
def _tile_scores(qt, kt, src_q, src_k, head_rows, row_ok, key_rows, key_ok,
                 num_sources, D: tl.constexpr, BM: tl.constexpr,
                 BN: tl.constexpr, READ: tl.constexpr, SOURCES: tl.constexpr,
                 IEEE: tl.constexpr):
  """A [BM, BN] tile's q.k, + the sources' sum where the pattern reads
  it from them (READ with SOURCES)."""
  s = _scores(qt, kt, IEEE)
  if SOURCES:
    if READ:
      s += _source_scores(src_q, src_k, head_rows, row_ok, key_rows, key_ok,
                          num_sources, D, BM, BN, IEEE)
  return s


# A row past the end gets this first key: none of its columns is a cell.
PAST_ROWS = tl.constexpr(1 << 30)


@triton.jit
def _cells(c, width, row_ok, key_ok, BAND: tl.constexpr):
  """Which of a tile's scores are the query's: on the band, 0 <= c <
  width as one unsigned compare a score (its rows past the end start at
  PAST_ROWS, and its valid rows' bands end before the keys do); a
  thread's predicates are few and each use recomputes them, so a compare
  saved is saved at every use. Dense: the rows' and keys' own masks,
  which leave Triton the loads' constancy along the keys."""
  if BAND:
    return c.to(tl.uint32, bitcast=True) < width.to(tl.uint32)
  return row_ok[:, None] & key_ok[None, :]


@triton.jit
def _mix32(x):
  """`dropout._mix32` (lowbias32) on uint32 values."""
  x ^= x >> 16
  x *= tl.full([], 0x21F0AAAD, tl.uint32)
  x ^= x >> 15
  x *= tl.full([], 0xD35A2D97, tl.uint32)
  x ^= x >> 15
  return x


@triton.jit
def _keep(row_index, row_start, n0, width, seeds, pattern: tl.constexpr,
          keep_threshold, BM: tl.constexpr, BN: tl.constexpr):
  """The hash dropout's keep decisions of a [BM, BN] tile over keys
  [n0, n0 + BN), n0 even (`dropout.hash_pairs`): keys 2j and 2j + 1 of a
  row share the hash of their pair, at row_index * (width // 2 + 1) +
  j - row_start // 2 of the pattern's rows-first layout; its high 16 bits
  decide the even key, the low 16 the odd one. One hash a pair: half the
  integer work of one an element, and the pair's two columns are the ones
  a thread holds side by side in the products' layout."""
  k0 = tl.load(seeds + 2 * pattern).to(tl.uint32, bitcast=True)
  k1 = tl.load(seeds + 2 * pattern + 1).to(tl.uint32, bitcast=True)
  pairs = (n0 // 2 + tl.arange(0, BN // 2)).to(tl.uint32)
  index = (row_index[:, None] * (width // 2 + 1).to(tl.uint32) + k0 +
           pairs[None, :] - (row_start // 2).to(tl.uint32)[:, None])
  bits = _mix32(_mix32(index) ^ k1)
  halves = tl.reshape(tl.join(bits >> 16, bits & 0xFFFF), [BM, BN])
  return halves >= keep_threshold.to(tl.uint32)


@triton.jit
def _row_index(rows, batch, head, batch_size, num_heads, num_rows, block_len,
               BAND: tl.constexpr, BY_ROWS: tl.constexpr):
  """The rows' part of the dropout index (`dropout.row_major_index`):
  rows first in row blocks (b queries on the band branch, else 1), or
  row-major over [B, H, N, K]; uint32 [BM]."""
  if BY_ROWS:
    row_block = block_len if BAND else 1
    block = rows // row_block
    index = (((block * batch_size + batch) * num_heads + head) * row_block
             + rows - block * row_block)
  else:
    index = (batch * num_heads + head) * num_rows + rows
  return index.to(tl.uint32)


@triton.jit
def _first_keys(rows, row_ok, first_row, BM: tl.constexpr, num_rows,
                first_len, block_len, BAND: tl.constexpr):
  """The first pattern's keys for a tile of query rows: (width: score
  columns per query, each row's first key row, the key rows to visit
  [start, stop)). Band: the padded key rows of every band the tile
  touches, column = key row - the row's first (blocks k-1, k, k+1 of
  query block k; rows past the end start at PAST_ROWS); dense: every
  key, column = key."""
  if BAND:
    width = 3 * block_len
    row_start = tl.where(row_ok, (rows // block_len) * block_len, PAST_ROWS)
    last_row = tl.minimum(first_row + BM, num_rows) - 1
    # From an even key: the dropout hashes keys in pairs (`_keep`).
    start = (first_row // block_len) * block_len
    start -= start % 2
    stop = (last_row // block_len) * block_len + width
  else:
    width = first_len
    row_start = rows * 0
    start = 0
    stop = first_len
  return width, row_start, start, stop


@triton.jit
def _query_tile(num_heads, num_rows, BM: tl.constexpr):
  """This program's query rows (grid: query tiles, B * H): (the first, b *
  H + h, the batch, the head, the rows, which of them are < N, and their
  rows of [B, N, ...] and of [B, H, N, ...]). Offsets in int32 (64-bit
  index math on every [BM, BN] element costs time): the handlers refuse
  operands of 2^31 elements or more."""
  first_row = tl.program_id(0) * BM
  bh = tl.program_id(1)
  batch = bh // num_heads
  rows = first_row + tl.arange(0, BM)
  return (first_row, bh, batch, bh % num_heads, rows, rows < num_rows,
          batch * num_rows + rows, bh * num_rows + rows)


@triton.jit
def _pattern_keys(p: tl.constexpr, rows, row_ok, first_row, BM: tl.constexpr,
                  num_rows, first_len, second_len, block_len,
                  BAND: tl.constexpr):
  """Pattern p's keys for a tile of query rows: `_first_keys`'s (width,
  row_start, start, stop), the second's dense over second_len, and the
  pattern's key rows."""
  if p == 0:
    width, row_start, start, stop = _first_keys(
        rows, row_ok, first_row, BM, num_rows, first_len, block_len, BAND)
    key_rows = first_len
  else:
    width, row_start, start, stop = second_len, rows * 0, 0, second_len
    key_rows = second_len
  return width, row_start, start, stop, key_rows


@triton.jit
def _key_tile(n0, stop, row_start, width, row_ok, bh, key_rows, codes,
              codes_stride, flat_rows, D: tl.constexpr, BN: tl.constexpr,
              BAND: tl.constexpr):
  """A pattern's keys [n0, n0 + BN) for a tile of query rows: (the keys,
  which are < stop, each score's column and whether the pattern has it
  [BM, BN], the keys' offsets [BN, D] in [B, H, K, D], the scores'
  codes)."""
  keys = n0 + tl.arange(0, BN)
  key_ok = keys < stop
  c = keys[None, :] - row_start[:, None]  # the score's column
  cell = _cells(c, width, row_ok, key_ok, BAND)
  key_d = (bh * key_rows + keys)[:, None] * D + tl.arange(0, D)[None, :]
  code = tl.load(codes + flat_rows[:, None] * codes_stride + c,
                 mask=cell, other=NO_ID).to(tl.int32)
  return keys, key_ok, c, cell, key_d, code


# The softmax runs in base 2: the logits come out of `_logits` times
# log2(e), folded into the scale it multiplies anyway, so that each score's
# exp is one ex2 (tl.exp multiplies by log2(e) first); lse stays natural.
LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _has_id(code, cell, BAND: tl.constexpr):
  """Which of a tile's scores have a relative term: its cells, less the
  band's NO_ID columns (a dense pattern's codes are never NO_ID: a
  compare a score saved wherever the per-id score is read)."""
  if BAND:
    return cell & (code != NO_ID)
  return cell


@triton.jit
def _logits(s, code, cell, per_id, flat_rows, num_ids, num_heads, head,
            prev, new, stream_offsets, scale, HAS_IDS: tl.constexpr,
            READ: tl.constexpr, WRITE: tl.constexpr,
            SOURCES: tl.constexpr, BAND: tl.constexpr):
  """The logits of a [BM, BN] tile of scores q.k, in base 2 (times
  LOG2E): + the relative score, RealFormer's rule (+ prev, new written,
  * scale), - 10000 where masked; -inf where the key is not the query's
  (`cell` false: outside its band, or past the end). With SOURCES, s
  already holds the previous sum (`_source_scores`) and prev is not
  read. BAND: the tile is the band's, whose codes may be NO_ID."""
  masked = code < 0
  if HAS_IDS:
    s += tl.load(per_id + (flat_rows[:, None] * num_ids + (code & 0x7F))
                 * num_heads + head, mask=_has_id(code, cell, BAND),
                 other=0.0)
  if READ:
    if not SOURCES:
      s += tl.load(prev + stream_offsets, mask=cell,
                   other=0.0).to(tl.float32)
  if WRITE:
    tl.store(new + stream_offsets, s.to(new.dtype.element_ty), mask=cell)
  # scale: 1 unless the pattern's running mean divides it.
  s = s * (scale * LOG2E)
  s = tl.where(masked, s - 10000.0 * LOG2E, s)
  return tl.where(cell, s, float("-inf"))


@triton.jit
def _online_softmax(s, vt, keep, m_i, l_i, acc, IEEE: tl.constexpr,
                    DROPOUT: tl.constexpr):
  """One key tile into the running softmax: logits s [BM, BN] (base 2),
  values [BN, D], keep decisions; returns the new (max, sum, context) of
  each row (the sum over every key, the context over the kept ones)."""
  m_new = tl.maximum(m_i, tl.max(s, 1))
  alpha = tl.exp2(m_i - m_new)
  p = tl.exp2(s - m_new[:, None])
  l_i = l_i * alpha + tl.sum(p, 1)
  if DROPOUT:
    p = tl.where(keep, p, 0.0)
  acc = acc * alpha[:, None] + _context(p, vt, IEEE)
  return m_new, l_i, acc


@triton.jit
def branch_forward(q, k1, v1, k2, v2, per_id, codes1, codes2, valid, prev1,
                   prev2, src_q, src_k1, src_k2, seeds, ctx, lse, new1, new2,
                   batch_size, num_heads, num_rows, first_len, second_len,
                   num_ids, block_len, codes1_stride, num_sources,
                   keep_threshold, gain, scale1, scale2,
                   D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                   R: tl.constexpr, BAND: tl.constexpr, HAS_IDS: tl.constexpr,
                   READ1: tl.constexpr, READ2: tl.constexpr,
                   WRITE1: tl.constexpr, WRITE2: tl.constexpr,
                   SOURCES: tl.constexpr, DROPOUT: tl.constexpr,
                   BY_ROWS: tl.constexpr, IEEE: tl.constexpr):
  """One program: BM query rows of one (batch, head); grid
  (cdiv(N, BM), B * H).

  first_len: the rows of k1 (band: N + 2b; dense: K1). R: num_ids rounded
  up to a power of two. READ/WRITE: the pattern's previous running sum is
  read / its new one written (a carried pattern; scale: 1, or 1 / layers
  with the running mean). SOURCES: a read pattern's previous sum is made
  from the num_sources earlier layers' src_q and src_k (recomputed
  streams). DROPOUT: keep_threshold and gain apply
  (`dropout.keep_threshold`, `keep_gain`); BY_ROWS: the dropout index is
  laid out rows first (row blocks of b queries on the band branch), else
  row-major over [B, H, N, K].
  """
  first_row, bh, batch, head, rows, row_ok, flat_rows, head_rows = (
      _query_tile(num_heads, num_rows, BM))
  d = tl.arange(0, D)
  qt = tl.load(q + head_rows[:, None] * D + d[None, :],
               mask=row_ok[:, None], other=0.0)
  row_index = _row_index(rows, batch, head, batch_size, num_heads,
                         num_rows, block_len, BAND, BY_ROWS)

  m_i = tl.full([BM], -1e30, tl.float32)  # finite: exp(-inf - -inf) is NaN
  l_i = tl.zeros([BM], tl.float32)
  acc = tl.zeros([BM, D], tl.float32)
  keep = tl.full([BM, BN], True, tl.int1)

  # Both patterns, one after the other (unrolled: each has its pointers).
  for p in tl.static_range(2):
    if p == 0:
      k, v, codes, prev, new, src_k = k1, v1, codes1, prev1, new1, src_k1
      codes_stride, scale, read, write = codes1_stride, scale1, READ1, WRITE1
    else:
      k, v, codes, prev, new, src_k = k2, v2, codes2, prev2, new2, src_k2
      codes_stride, scale, read, write = second_len, scale2, READ2, WRITE2
    width, row_start, start, stop, key_rows = _pattern_keys(
        p, rows, row_ok, first_row, BM, num_rows, first_len, second_len,
        block_len, BAND)
    for n0 in range(start, stop, BN):
      keys, key_ok, c, cell, key_d, code = _key_tile(
          n0, stop, row_start, width, row_ok, bh, key_rows, codes,
          codes_stride, flat_rows, D, BN, BAND and p == 0)
      s = _tile_scores(qt, tl.load(k + key_d, mask=key_ok[:, None],
                                   other=0.0),
                       src_q, src_k, head_rows, row_ok, bh * key_rows + keys,
                       key_ok, num_sources, D, BM, BN, read, SOURCES, IEEE)
      s = _logits(s, code, cell, per_id, flat_rows, num_ids, num_heads,
                  head, prev, new, head_rows[:, None] * width + c, scale,
                  HAS_IDS, read, write, SOURCES, BAND and p == 0)
      if DROPOUT:
        keep = _keep(row_index, row_start, n0, width, seeds, p, keep_threshold,
                     BM, BN)
      vt = tl.load(v + key_d, mask=key_ok[:, None], other=0.0)
      m_i, l_i, acc = _online_softmax(s, vt, keep, m_i, l_i, acc, IEEE,
                                      DROPOUT)

  row_valid = tl.load(valid + flat_rows, mask=row_ok, other=0.0)
  l_i = tl.where(row_ok, l_i, 1.0)  # rows past N (not stored) summed 0
  if DROPOUT:
    row_valid *= gain
  out = acc * (row_valid / l_i)[:, None]
  tl.store(ctx + head_rows[:, None] * D + d[None, :],
           out.to(ctx.dtype.element_ty), mask=row_ok[:, None])
  tl.store(lse + head_rows, (m_i + tl.log2(l_i)) * LN2, mask=row_ok)


# ------------------------------------------------------------ backward pass
# Two kernels, as FlashAttention's: `branch_backward_queries` over query tiles
# (dq, the per-id scores' gradient, the previous sums' gradient, and the
# rows' delta = dctx . ctx) and `branch_backward_keys` over one pattern's key
# tiles (dk, dv), each recomputing the probabilities from the saved lse.
# Per score (`reference.branch_backward`): dP = dctx . v through dropout's
# mask and gain, dlogit = P (dP - delta), and the score's gradient
# dlogit * scale + the emitted sum's incoming gradient (carried patterns),
# which is also the previous sum's.


@triton.jit
def _tile_grads(s, vt, do, code, cell, per_id, flat_rows, num_ids,
                num_heads, head, prev, dnew, stream_offsets, scale, lse_rows,
                valid_rows, delta_rows, keep, gain, HAS_IDS: tl.constexpr,
                READ: tl.constexpr, WRITE: tl.constexpr,
                SOURCES: tl.constexpr, DROPOUT: tl.constexpr,
                IEEE: tl.constexpr, BAND: tl.constexpr):
  """A [BM, BN] tile's (dropped probabilities, score gradients), float32,
  from its scores s (q.k, + the sources' with SOURCES) and its rows' lse
  in base 2; BAND as `_logits`'."""
  s = _logits(s, code, cell, per_id, flat_rows, num_ids, num_heads, head,
              prev, prev, stream_offsets, scale, HAS_IDS, READ, False,
              SOURCES, BAND)
  p = tl.exp2(s - lse_rows[:, None]) * valid_rows[:, None]
  dp = _scores(do, vt, IEEE)
  if DROPOUT:
    dp = tl.where(keep, dp * gain, 0.0)
    dropped = tl.where(keep, p * gain, 0.0)
  else:
    dropped = p
  ds = p * (dp - delta_rows[:, None]) * scale
  if WRITE:
    ds += tl.load(dnew + stream_offsets, mask=cell, other=0.0).to(tl.float32)
  return dropped, tl.where(cell, ds, 0.0)


@triton.jit
def _id_sums(table, ds, code, cell, R: tl.constexpr, BAND: tl.constexpr):
  """table [BM, R] += the score gradients of each relative id, per row.

  A row's scores share ids (clipped distances), so the sums are a per-row
  segmented reduction: one masked row sum per id, in registers (atomics on
  the few hot ids of a row would serialize, and make the sums depend on
  the order). Only the ids the tile holds are summed: a tile of global
  keys holds a few (ETC's l2g and g2l ids say little more than "same
  sentence"), a band tile about its width's distances."""
  rel_id = code & 0x7F
  has = _has_id(code, cell, BAND)
  first = tl.min(tl.where(has, rel_id, R))
  last = tl.max(tl.where(has, rel_id, -1))
  r = tl.arange(0, R)
  for index in range(first, last + 1):
    col = tl.sum(tl.where(has & (rel_id == index), ds, 0.0), 1)
    table = tl.where(r[None, :] == index, table + col[:, None], table)
  return table


@triton.jit
def branch_backward_queries(
    q, k1, v1, k2, v2, per_id, codes1, codes2, valid, prev1, prev2, src_q,
    src_k1, src_k2, seeds, ctx, lse, dctx, dnew1, dnew2, dq, dper_id,
    dprev1, dprev2, delta,
    batch_size, num_heads, num_rows, first_len, second_len, num_ids,
    block_len, codes1_stride, num_sources, keep_threshold, gain, scale1,
    scale2,
    D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, R: tl.constexpr,
    BAND: tl.constexpr, HAS_IDS: tl.constexpr, READ1: tl.constexpr,
    READ2: tl.constexpr, WRITE1: tl.constexpr, WRITE2: tl.constexpr,
    SOURCES: tl.constexpr, DROPOUT: tl.constexpr, BY_ROWS: tl.constexpr,
    IEEE: tl.constexpr):
  """One program: BM query rows of one (batch, head), as `branch_forward`.

  Reads the forward's inputs, its ctx and lse, and the gradients of ctx
  and of the emitted sums (dnew, WRITE); writes dq <T>[B, H, N, D],
  dper_id <f32>[B, N, R, H] (this head's column), the read sums' gradients
  dprev (READ; their dtype; with SOURCES the gradient of the sources'
  sum, which the graph turns into theirs) and delta <f32>[B, H, N] for
  `branch_backward_keys`.
  """
  first_row, bh, batch, head, rows, row_ok, flat_rows, head_rows = (
      _query_tile(num_heads, num_rows, BM))
  d = tl.arange(0, D)
  row_d = head_rows[:, None] * D + d[None, :]
  qt = tl.load(q + row_d, mask=row_ok[:, None], other=0.0)
  do = tl.load(dctx + row_d, mask=row_ok[:, None], other=0.0)
  out = tl.load(ctx + row_d, mask=row_ok[:, None], other=0.0)
  delta_rows = tl.sum(do.to(tl.float32) * out.to(tl.float32), 1)
  tl.store(delta + head_rows, delta_rows, mask=row_ok)
  lse_rows = tl.load(lse + head_rows, mask=row_ok, other=0.0) * LOG2E
  valid_rows = tl.load(valid + flat_rows, mask=row_ok, other=0.0)
  row_index = _row_index(rows, batch, head, batch_size, num_heads,
                         num_rows, block_len, BAND, BY_ROWS)
  dq_acc = tl.zeros([BM, D], tl.float32)
  table = tl.zeros([BM, R], tl.float32)
  keep = tl.full([BM, BN], True, tl.int1)

  for p in tl.static_range(2):  # as in `branch_forward`
    width, row_start, start, stop, key_rows = _pattern_keys(
        p, rows, row_ok, first_row, BM, num_rows, first_len, second_len,
        block_len, BAND)
    if p == 0:
      k, v, codes, prev, dnew, dprev = k1, v1, codes1, prev1, dnew1, dprev1
      codes_stride, scale, read, write = codes1_stride, scale1, READ1, WRITE1
      src_k = src_k1
    else:
      k, v, codes, prev, dnew, dprev = k2, v2, codes2, prev2, dnew2, dprev2
      codes_stride, scale, read, write = second_len, scale2, READ2, WRITE2
      src_k = src_k2
    for n0 in range(start, stop, BN):
      keys, key_ok, c, cell, key_d, code = _key_tile(
          n0, stop, row_start, width, row_ok, bh, key_rows, codes,
          codes_stride, flat_rows, D, BN, BAND and p == 0)
      kt = tl.load(k + key_d, mask=key_ok[:, None], other=0.0)
      vt = tl.load(v + key_d, mask=key_ok[:, None], other=0.0)
      if DROPOUT:
        keep = _keep(row_index, row_start, n0, width, seeds, p, keep_threshold,
                     BM, BN)
      offsets = head_rows[:, None] * width + c
      s = _tile_scores(qt, kt, src_q, src_k, head_rows, row_ok,
                       bh * key_rows + keys, key_ok, num_sources, D, BM, BN,
                       read, SOURCES, IEEE)
      _, ds = _tile_grads(s, vt, do, code, cell, per_id, flat_rows,
                          num_ids, num_heads, head, prev, dnew, offsets,
                          scale, lse_rows, valid_rows, delta_rows, keep,
                          gain, HAS_IDS, read, write, SOURCES, DROPOUT,
                          IEEE, BAND and p == 0)
      if read:
        tl.store(dprev + offsets, ds.to(dprev.dtype.element_ty), mask=cell)
      dq_acc += _context(ds, kt, IEEE)
      if HAS_IDS:
        table = _id_sums(table, ds, code, cell, R, BAND and p == 0)

  tl.store(dq + row_d, dq_acc.to(dq.dtype.element_ty), mask=row_ok[:, None])
  if HAS_IDS:
    r = tl.arange(0, R)
    tl.store(dper_id + (flat_rows[:, None] * num_ids + r[None, :])
             * num_heads + head, table,
             mask=row_ok[:, None] & (r[None, :] < num_ids))


@triton.jit
def branch_backward_keys(
    q, k, v, per_id, codes, valid, prev, src_q, src_k, seeds, lse, delta,
    dctx, dnew, dk, dv, batch_size, num_heads, num_rows, key_rows, num_ids,
    block_len, codes_stride, num_sources, keep_threshold, gain, scale,
    D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, R: tl.constexpr,
    BAND: tl.constexpr, HAS_IDS: tl.constexpr, READ: tl.constexpr,
    WRITE: tl.constexpr, SOURCES: tl.constexpr, DROPOUT: tl.constexpr,
    BY_ROWS: tl.constexpr, IEEE: tl.constexpr, PATTERN: tl.constexpr,
    BAND_BRANCH: tl.constexpr):
  """One program: BN keys (rows of k and v) of one pattern and (batch,
  head); grid (cdiv(key_rows, BN), B * H).

  k, v, codes, prev, src_k, dnew, scale: the pattern's (PATTERN 0: the
  first, 1: the second, whose dropout seed it reads). BAND: this pattern is
  the band (key_rows = N + 2b; the queries of the blocks that see these
  rows); else dense (every query). BAND_BRANCH: the branch's first pattern is
  the band (the dropout index's row blocks). Writes dk, dv <T>[B, H, K, D].
  """
  pid_n = tl.program_id(0)
  bh = tl.program_id(1)
  batch = bh // num_heads
  head = bh % num_heads
  keys = pid_n * BN + tl.arange(0, BN)
  key_ok = keys < key_rows
  d = tl.arange(0, D)
  key_d = (bh * key_rows + keys)[:, None] * D + d[None, :]
  kt = tl.load(k + key_d, mask=key_ok[:, None], other=0.0)
  vt = tl.load(v + key_d, mask=key_ok[:, None], other=0.0)
  dk_acc = tl.zeros([BN, D], tl.float32)
  dv_acc = tl.zeros([BN, D], tl.float32)
  keep = tl.full([BM, BN], True, tl.int1)
  if BAND:
    width = 3 * block_len
    # Padded key row p lies in the bands of query blocks p // b - 2 .. p // b.
    last_key = tl.minimum(pid_n * BN + BN, key_rows) - 1
    start = tl.maximum((pid_n * BN) // block_len - 2, 0) * block_len
    stop = tl.minimum((last_key // block_len + 1) * block_len, num_rows)
  else:
    width = key_rows
    start = 0
    stop = num_rows
  for m0 in range(start, stop, BM):
    rows = m0 + tl.arange(0, BM)
    row_ok = rows < stop
    flat_rows = batch * num_rows + rows
    head_rows = bh * num_rows + rows
    row_d = head_rows[:, None] * D + d[None, :]
    if BAND:
      row_start = tl.where(row_ok, (rows // block_len) * block_len,
                           PAST_ROWS)
    else:
      row_start = rows * 0
    c = keys[None, :] - row_start[:, None]
    cell = _cells(c, width, row_ok, key_ok, BAND)
    qt = tl.load(q + row_d, mask=row_ok[:, None], other=0.0)
    do = tl.load(dctx + row_d, mask=row_ok[:, None], other=0.0)
    lse_rows = tl.load(lse + head_rows, mask=row_ok, other=0.0) * LOG2E
    valid_rows = tl.load(valid + flat_rows, mask=row_ok, other=0.0)
    delta_rows = tl.load(delta + head_rows, mask=row_ok, other=0.0)
    code = tl.load(codes + flat_rows[:, None] * codes_stride + c, mask=cell,
                   other=NO_ID).to(tl.int32)
    if DROPOUT:
      row_index = _row_index(rows, batch, head, batch_size, num_heads,
                             num_rows, block_len, BAND_BRANCH, BY_ROWS)
      keep = _keep(row_index, row_start, pid_n * BN, width, seeds, PATTERN,
                   keep_threshold, BM, BN)
    s = _tile_scores(qt, kt, src_q, src_k, head_rows, row_ok,
                     bh * key_rows + keys, key_ok, num_sources, D, BM, BN,
                     READ, SOURCES, IEEE)
    dropped, ds = _tile_grads(s, vt, do, code, cell, per_id, flat_rows,
                              num_ids, num_heads, head, prev, dnew,
                              head_rows[:, None] * width + c, scale,
                              lse_rows, valid_rows, delta_rows, keep, gain,
                              HAS_IDS, READ, WRITE, SOURCES, DROPOUT, IEEE,
                              BAND)
    dk_acc += _context(tl.trans(ds), qt, IEEE)
    dv_acc += _context(tl.trans(dropped), do, IEEE)
  tl.store(dk + key_d, dk_acc.to(dk.dtype.element_ty), mask=key_ok[:, None])
  tl.store(dv + key_d, dv_acc.to(dv.dtype.element_ty), mask=key_ok[:, None])
