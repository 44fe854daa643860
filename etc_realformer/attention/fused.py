"""The attention core's branches as fused kernels (XLA custom calls).

With `ExecutionConfig(attention_kernel='fused')`, a layer traced for XLA
runs each branch as one custom call, `etc_branch_forward`
(`custom_calls`), whose handlers (`ffi_library`: C++ on the host, the
Triton kernel `triton_attention.branch_forward` on CUDA) keep scores, masks,
softmax statistics and dropout decisions on chip:

  covered   either branch (long: the l2l band or, on the full path, dense
            l2l, + l2g; global: g2g + g2l); RealFormer streams on any
            subset of the patterns (summed: float32 or the compute dtype,
            running mean; or recomputed, `recompute_residual_streams`:
            the sums made in the kernels from the earlier layers' queries
            and keys, in each pass, see `fused_branch`); dropout
            of the probabilities in training with the hash generator
            (`ExecutionConfig.dropout_rng='hash'`: the kernel draws the
            XLA path's masks)
  not yet   probabilities returned (analysis), Philox dropout in training,
            relative ids on one pattern of a branch only (never from ETC's
            features)

A branch that is not covered runs on `core.attend_branch`, and the
first such fallback is logged with its reason. The kernels keep the
probabilities in float32 on chip, so `softmax_dtype` does not change a
fused branch.

The gradient is a second custom call, `etc_branch_backward`: the kernels
`branch_backward_queries` and `branch_backward_keys` recompute the
probabilities from the forward's row statistics (lse) and write the
gradients of q, the keys, the values, the per-id relative scores and the
previous running sums, never a score-sized tensor besides those sums'.
"""

from typing import Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf
# XLA's optimization barrier (see `attention/chunking.py` for why this module).
from tensorflow.compiler.tf2xla.python import xla as tf2xla

from etc_realformer.attention import blocking
from etc_realformer.attention import core
from etc_realformer.attention import dropout as dropout_lib
from etc_realformer.attention.pieces import BranchInputs
from etc_realformer.attention.pieces import BranchMasks
from etc_realformer.attention.pieces import BranchOutputs
from etc_realformer.attention.pieces import PatternPair
from etc_realformer.attention.pieces import ScoreInputs
from etc_realformer.kernels import custom_calls
from etc_realformer.kernels import ffi_library
from etc_realformer.kernels import format as kernel_format

BRANCH_FORWARD = kernel_format.FORWARD_TARGET
BRANCH_BACKWARD = kernel_format.BACKWARD_TARGET
# Relative ids travel in int8 codes' low 7 bits; 127 is NO_ID's.
MAX_IDS = kernel_format.MAX_ID + 1
_DTYPES = (tf.float32, tf.bfloat16, tf.float16)


def uncovered_reason(spec: core.BranchSpec, x: BranchInputs[tf.Tensor]
                     ) -> Optional[str]:
  """Why the fused kernels do not compute this branch (None: they do)."""
  if spec.return_probs:
    return "probabilities are returned"
  d = spec.dropout
  if (d.training and d.rate > 0.0 and
      d.rng != dropout_lib.HASH):
    return (f"dropout_rng={d.rng!r} in training (the kernels draw the "
            f"'hash' generator's masks)")
  q = x.scores.q
  if q.dtype not in _DTYPES:
    return f"dtype {q.dtype.name}"
  pieces = [q, *x.values, *(k for k in x.scores.keys),
            *(s for s in x.sums if s is not None)]
  if not all(t.shape.is_fully_defined() for t in pieces):
    return "dynamic shapes"
  size = q.shape[-1]
  if size < 16 or size & (size - 1):
    return f"head size {size} (a power of two from 16)"
  stream_dtype = _stream_dtype(spec, q.dtype)
  if any(s.dtype != stream_dtype for s in x.sums if s is not None):
    # A kernel reads and writes the sums in one dtype.
    return (f"running sums read in another dtype than the "
            f"{stream_dtype.name} they are written in")
  per_id = x.scores.per_id
  if per_id is not None and (x.masks.ids.first is None) != (
      x.masks.ids.second is None):
    # A code is an id, or masked: it cannot say "unmasked, no relative
    # term" (ETC's features give every pattern ids, or none).
    return "relative ids on one pattern of the branch only"
  if per_id is not None and per_id.shape[-2] > MAX_IDS:
    return f"{per_id.shape[-2]} relative ids (int8 codes: at most {MAX_IDS})"
  return None


def _stream_dtype(spec: core.BranchSpec, dtype: tf.DType) -> tf.DType:
  """The running sums' dtype: the inputs' with `StreamSpec.low_precision`,
  else float32 (`core`'s rule)."""
  return dtype if spec.streams.low_precision else tf.float32


def covers(spec: core.BranchSpec, x: BranchInputs[tf.Tensor]) -> bool:
  """Whether the fused kernels compute this branch (module docstring)."""
  return uncovered_reason(spec, x) is None


def _rows(spec: core.BranchSpec, t: Optional[tf.Tensor], axis: int
          ) -> Optional[tf.Tensor]:
  """Query blocks -> rows on the band branch ([.., nb, b, ..] at `axis`)."""
  if t is None or not spec.band:
    return t
  return blocking.merge_axes(t, axis)


def _blocks(spec: core.BranchSpec, t: Optional[tf.Tensor], axis: int
            ) -> Optional[tf.Tensor]:
  """Rows -> query blocks on the band branch (the inverse of `_rows`)."""
  if t is None or not spec.band:
    return t
  return blocking.split_axis(t, axis, spec.block_len)


def fused_branch(spec: core.BranchSpec, x: BranchInputs[tf.Tensor]
                 ) -> BranchOutputs[tf.Tensor]:
  """`core.attend_branch` of a whole branch, as custom calls: the
  forward, and the backward in its gradient.

  With recomputed streams (`x.sources`) no sum is read from memory: the
  kernels make each tile's earlier-layer sum from the sources (`_Joined`:
  the layers' queries and keys concatenated along the head size), and the
  backward's gradient of that sum (dprev) reaches the sources' queries
  and keys through the products it stands for, and their per-id scores
  as the kernels' per-id gradient. Where the per-id scores would differ
  between the patterns (relative ids, one pattern carried), the sums are
  rebuilt in the graph instead (`rebuilt_sums`) and read as summed ones.
  Either way the sources pass an optimization barrier in each pass, so
  XLA neither joins them early nor keeps the forward's joins.

  Args:
    spec: the branch (`covers(spec, x)`).
    x: its pieces in the core's layouts (`pieces.BranchInputs`).

  Returns:
    The context, and the new running sums of the carried patterns with
    `spec.streams.emit` (no probabilities).
  """
  ffi_library.load_into_tensorflow()
  if x.sources:
    has_ids = x.scores.per_id is not None and x.masks.ids.first is not None
    if has_ids and not all(spec.is_carried):
      return _fused_branch_rebuilt(spec, x)
    return _fused_branch_sources(spec, x)
  call = _BranchCall(spec, x)
  own = call.inputs()
  prev = [_rows(spec, s, 2) if r else None
          for s, r in zip(x.sums, call.reads)]

  @tf.custom_gradient
  def fused(*args):
    n = len(own)
    it = iter(args[n:])
    prev_args = [next(it) if r else None for r in call.reads]
    ctx, lse, emitted = call.forward(args[:n], prev_args)

    def grad(*upstream):
      it = iter(upstream[1:])
      dnew = [next(it) if e else None for e in call.emits]
      grads, dprev = call.backward(args[:n], prev_args, ctx, lse,
                                   upstream[0], dnew)
      return grads + [d for d in dprev if d is not None]

    return [ctx] + emitted, grad

  outs = fused(*own, *(p for p in prev if p is not None))
  it = iter(outs[1:])
  sums = PatternPair(*(_blocks(spec, next(it), 2) if e else None
                       for e in call.emits))
  return BranchOutputs(ctx=_blocks(spec, outs[0], 2), sums=sums)


def _after(sources: Sequence[tf.Tensor], tensor: tf.Tensor
           ) -> Tuple[list, tf.Tensor]:
  """`sources` and `tensor` through one optimization barrier: what is made
  of them waits for `tensor` (in the forward pass this layer's queries, so
  no scheduler joins every layer's sources at the start; in the backward
  the context's gradient), and is a new expression that XLA cannot merge
  with, and keep from, the forward pass (as `chunking`'s recomputation)."""
  barred = tf2xla.optimization_barrier(*sources, tensor)
  return list(barred[:-1]), barred[-1]


class _Joined:
  """The sources of recomputed streams as the kernels read them: the
  earlier layers' queries and keys concatenated along the head size
  ([.., J * D]: sum_j q_j.k_j = [q_0 | q_1 | ..] . [k_0 | k_1 | ..]) and
  their per-id scores summed (a pattern carried on every earlier layer
  gets them all), in the core's layouts."""

  def __init__(self, spec: core.BranchSpec,
               sources: Sequence[ScoreInputs[tf.Tensor]]):
    self.spec = spec
    carried = spec.is_carried
    self.q = tf.concat([s.q for s in sources], -1)
    self.keys = PatternPair(*(tf.concat([s.keys[i] for s in sources], -1)
                              if c else None for i, c in enumerate(carried)))
    per_ids = [s.per_id for s in sources if s.per_id is not None]
    self.per_id = tf.add_n(per_ids) if per_ids else None

  def operands(self) -> list:
    """src_q, src_k1, src_k2 in the kernels' row layout (None: unread)."""
    k1, k2 = self.keys  # the second pattern's keys are never blocked
    return [_rows(self.spec, self.q, 2),
            _rows(self.spec, k1, 2) if k1 is not None else None, k2]

  def products(self, size: blocking.Dim) -> PatternPair[tf.Tensor]:
    """The sums the kernels make (the carried patterns'), as the graph's
    products: what their gradient flows through."""
    return core.branch_scores(self.spec, ScoreInputs(self.q, self.keys),
                              PatternPair(), size, self.spec.is_carried)


def _fused_branch_sources(spec: core.BranchSpec, x: BranchInputs[tf.Tensor]
                          ) -> BranchOutputs[tf.Tensor]:
  """`fused_branch` with recomputed streams, the sums made in the kernels."""
  call = _BranchCall(spec, x, num_sources=len(x.sources))
  own = call.inputs()
  n = len(own)
  size = blocking.dim(x.scores.q, 2)
  flat_sources = tf.nest.flatten(x.sources)

  def joined(flat) -> _Joined:
    return _Joined(spec, tf.nest.pack_sequence_as(x.sources, list(flat)))

  def with_sources(args, sources: _Joined) -> list:
    out = list(args)
    if sources.per_id is not None:  # the per-id scores of every layer
      out[5] = out[5] + _rows(spec, sources.per_id, 1)
    return out

  @tf.custom_gradient
  def fused(*args):
    sources = joined(_after(args[n:], args[0])[0])
    ctx, lse, _ = call.forward(with_sources(args[:n], sources), [None, None],
                               sources.operands())

    def grad(dctx):
      flat, dctx = _after(args[n:], dctx)  # joined anew, not kept
      with tf.GradientTape() as tape:
        tape.watch(flat)
        sources = joined(flat)
        products = sources.products(size)
      grads, dprev = call.backward(with_sources(args[:n], sources),
                                   [None, None], ctx, lse, dctx, [],
                                   sources.operands())
      targets = [p for p, r in zip(products, call.reads) if r]
      upstream = [_blocks(spec, d, 2) for d, r in zip(dprev, call.reads)
                  if r]
      if sources.per_id is not None:
        targets.append(sources.per_id)
        upstream.append(_blocks(spec, grads[5], 1))
      dsources = tape.gradient(
          targets, flat, output_gradients=upstream,
          unconnected_gradients=tf.UnconnectedGradients.ZERO)
      return grads + list(dsources)

    return ctx, grad

  return BranchOutputs(ctx=_blocks(spec, fused(*own, *flat_sources), 2))


def _fused_branch_rebuilt(spec: core.BranchSpec, x: BranchInputs[tf.Tensor]
                          ) -> BranchOutputs[tf.Tensor]:
  """`fused_branch` with recomputed streams rebuilt in the graph
  (`rebuilt_sums`) and read by the kernels as summed ones."""
  call = _BranchCall(spec, x)
  own = call.inputs()
  n = len(own)
  size = blocking.dim(x.scores.q, 2)
  flat_sources = tf.nest.flatten(x.sources)

  def previous(flat: Sequence[tf.Tensor]) -> list:
    sums = rebuilt_sums(spec, tf.nest.pack_sequence_as(x.sources,
                                                       list(flat)),
                        x.masks, size)
    return [_rows(spec, s, 2) if r else None
            for s, r in zip(sums, call.reads)]

  @tf.custom_gradient
  def fused(*args):
    ctx, lse, _ = call.forward(args[:n],
                               previous(_after(args[n:], args[0])[0]))

    def grad(dctx):
      flat, dctx = _after(args[n:], dctx)  # rebuilt anew, not kept
      with tf.GradientTape() as tape:
        tape.watch(flat)
        prev = previous(flat)
      grads, dprev = call.backward(args[:n], prev, ctx, lse, dctx, [])
      dsources = tape.gradient(
          [p for p in prev if p is not None], flat,
          output_gradients=[d for d, p in zip(dprev, prev) if p is not None],
          unconnected_gradients=tf.UnconnectedGradients.ZERO)
      return grads + list(dsources)

    return ctx, grad

  return BranchOutputs(ctx=_blocks(spec, fused(*own, *flat_sources), 2))


def rebuilt_sums(spec: core.BranchSpec,
                 sources: Sequence[ScoreInputs[tf.Tensor]],
                 masks: BranchMasks[tf.Tensor], size: blocking.Dim
                 ) -> PatternPair[tf.Tensor]:
  """The earlier layers' running sums of the carried patterns, rebuilt from
  their score inputs as ONE product per pattern: the layers' queries and
  keys concatenated along the head size (sum_j q_j.k_j = [q_0 | q_1 | ..]
  . [k_0 | k_1 | ..]) and their per-id scores summed. Each pattern's sum
  is then one score-sized tensor, never one per earlier layer (XLA
  schedules independent products side by side, and would keep them all),
  and its gradient reaches every layer through two products. Rounded once
  in the compute dtype, where the XLA path (`core`) rounds each
  layer's scores (docs/kernels.md, "What is covered").

  Returns:
    Per pattern, <float32> in the branch's score layout (None: not carried).
  """
  joined = _Joined(spec, sources)
  return core.branch_scores(spec,
                            ScoreInputs(joined.q, joined.keys, joined.per_id),
                            masks.ids, size, spec.is_carried)


class _BranchCall:
  """One branch's custom calls: their operands, results and attributes, and
  the two calls (`forward`, `backward`) on its differentiated inputs."""

  def __init__(self, spec: core.BranchSpec, x: BranchInputs[tf.Tensor],
               num_sources: int = 0):
    self.spec, self.x = spec, x
    q = _rows(spec, x.scores.q, 2)
    self.q = q
    batch, heads, num_rows, size = q.shape.as_list()
    self.shape = (batch, heads, num_rows, size)
    self.has_ids = x.scores.per_id is not None and x.masks.ids.first is not None
    carried = spec.is_carried
    if x.sources:
      # The earlier layers' sums (float32, made in the kernels from the
      # sources or rebuilt in the graph) are read; nothing is emitted: the
      # next layer makes its own.
      self.reads = carried
      self.emits = (False, False)
      self.stream_dtype = tf.float32
    else:
      self.reads = tuple(c and s is not None for c, s in zip(carried, x.sums))
      self.emits = tuple(c and spec.streams.emit for c in carried)
      self.stream_dtype = _stream_dtype(spec, q.dtype)
    mean = (1.0 / spec.streams.num_summed if spec.streams.running_mean and
            spec.streams.num_summed > 1 else 1.0)
    drop = spec.dropout
    dropout = drop.training and drop.rate > 0.0

    codes1, codes2 = attention_codes(spec, x.masks, self.has_ids)
    self.widths = (codes1.shape[-1] if not spec.band else 3 * spec.block_len,
                   codes2.shape[-1])
    if dropout:
      self.seeds = tf.concat([dropout_lib.fold_seed(x.seed,
                                                    drop.first_site + i)
                              for i in range(2)], 0)
    else:
      self.seeds = tf.zeros([4], tf.int32)
    self.placeholder = tf.zeros([1], tf.float32)
    self.constants = [codes1, codes2,
                      tf.reshape(x.masks.valid, [batch, num_rows])]
    self.attributes = {
        "band": spec.band, "block_len": spec.block_len if spec.band else 1,
        "has_ids": self.has_ids, "read_prev1": self.reads[0],
        "read_prev2": self.reads[1], "emit1": self.emits[0],
        "emit2": self.emits[1],
        "scale1": mean if carried[0] else 1.0,
        "scale2": mean if carried[1] else 1.0,
        "keep_threshold": (dropout_lib.keep_threshold(drop.rate) if dropout
                           else 0),
        "gain": dropout_lib.keep_gain(drop.rate, dropout),
        "by_rows": drop.by_rows, "sources": num_sources}

  def inputs(self) -> list:
    """The differentiated operands: q, first keys and values, second keys
    and values, per-id scores (a shaped placeholder without ids: the
    handlers read none of it)."""
    spec, x = self.spec, self.x
    batch, heads, num_rows, _ = self.shape
    if self.has_ids:
      per_id = _rows(spec, x.scores.per_id, 1)  # [B, N, R, H]
    else:
      per_id = tf.zeros([batch, num_rows, 1, heads], tf.float32)
    return [self.q, _rows(spec, x.scores.keys.first, 2),
            _rows(spec, x.values.first, 2), x.scores.keys.second,
            x.values.second, per_id]

  def _operands(self, own, prev, sources) -> list:
    sources = list(sources or []) + [None] * (3 - len(sources or []))
    return (list(own) + self.constants +
            [p if p is not None else self.placeholder for p in prev] +
            [t if t is not None else self.placeholder for t in sources] +
            [self.seeds])

  def forward(self, own, prev, sources=None):
    """(ctx, lse, the emitted new sums); `sources`: src_q, src_k1, src_k2
    (`_Joined.operands`) with `num_sources`."""
    batch, heads, num_rows, size = self.shape
    results = [([batch, heads, num_rows, size], self.q.dtype),
               ([batch, heads, num_rows], tf.float32)]
    for emit, width in zip(self.emits, self.widths):
      results.append(([batch, heads, num_rows, width], self.stream_dtype)
                     if emit else ([1], tf.float32))
    outs = custom_calls.custom_call(BRANCH_FORWARD,
                                    self._operands(own, prev, sources),
                                    results, self.attributes)
    return outs[0], outs[1], [o for o, e in zip(outs[2:], self.emits) if e]

  def backward(self, own, prev, ctx, lse, dctx, dnew, sources=None):
    """(the gradients of `own`, per pattern the read sums' gradient or
    None); `dnew`: per pattern the emitted sum's gradient or None;
    `sources` as `forward`'s."""
    batch, heads, num_rows, _ = self.shape
    dnew = [tf.cast(d, self.stream_dtype) if d is not None
            else self.placeholder
            for d in (list(dnew) + [None, None])[:2]]
    grads = custom_calls.custom_call(
        BRANCH_BACKWARD,
        self._operands(own, prev, sources) +
        [ctx, lse, tf.cast(dctx, self.q.dtype)] + dnew,
        [(a.shape.as_list(), a.dtype) for a in own] +
        [([batch, heads, num_rows, width], self.stream_dtype) if r
         else ([1], tf.float32) for r, width in zip(self.reads, self.widths)]
        +
        [([batch, heads, num_rows], tf.float32)],  # delta (scratch)
        self.attributes)
    out = list(grads[:6])
    if not self.has_ids:
      out[5] = None  # the placeholder
    dprev = [g if r else None for g, r in zip(grads[6:8], self.reads)]
    return out, dprev


def attention_codes(spec: core.BranchSpec, masks: BranchMasks[tf.Tensor],
                    has_ids: bool) -> Tuple[tf.Tensor, tf.Tensor]:
  """A branch's masks and relative ids as the kernels' int8 codes.

  Per score (`format`, `reference.codes`): the key's relative id (0
  without ids), id - 128 (the sign bit set) for a masked key, NO_ID (-1)
  for a masked key without a relative term (band columns outside the
  window: the kernels test for it on the band only). First pattern: band
  [B, Lp, Wb] (the band layout, rows padded with NO_ID to `band_stride`
  bytes) or dense [B, N, K1]; second [B, N, K2]. ETC's masks are hard
  (adders 0 or -10000), so a code carries what the adder did.
  """
  b = spec.block_len
  out = []
  for index in range(2):
    adder = masks.adders[index][:, 0]  # [B, (nb, b | N), K]
    ids = masks.ids[index] if has_ids else None
    if ids is None:
      ids = tf.fill(tf.shape(adder), -1)
    elif spec.band and index == 0:
      # Window [B, nb, b, 2b - 1] -> band [B, nb, b, 3b] (as the XLA
      # path's skew of the relative scores); -1 outside the window.
      ids = blocking.skew_right(ids + 1, offset=1, width=3 * b) - 1
    else:
      # ETC's ids are never negative (the XLA path's gather needs them in
      # the table); clipped so that only the band's codes are NO_ID.
      ids = tf.maximum(ids, 0)
    code = tf.where(adder == 0.0, tf.maximum(ids, 0),
                    tf.where(ids >= 0, kernel_format.MASKED + ids,
                             kernel_format.NO_ID))
    code = tf.cast(_rows(spec, code, 1), tf.int8)
    if spec.band and index == 0:
      code = tf.pad(code, [[0, 0], [0, 0],
                           [0, kernel_format.band_stride(b) - 3 * b]],
                    constant_values=kernel_format.NO_ID)
    out.append(code)
  return out[0], out[1]


def covers_or_log(spec: core.BranchSpec, x: BranchInputs[tf.Tensor]
                  ) -> bool:
  """`covers`, logging the first branch that is not covered with its reason
  (so a user of the option sees where it does not act)."""
  reason = uncovered_reason(spec, x)
  if reason is None:
    return True
  logging.log_first_n(logging.INFO,
                      "attention_kernel='fused': the %s branch runs on the "
                      "XLA path: %s", 1, "/".join(spec.patterns), reason)
  return False
