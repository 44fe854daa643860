"""The attention core's sides as fused kernels (XLA custom calls).

With `ExecutionConfig(attention_kernel='fused')`, a layer traced for XLA
runs each query side as one custom call, `etc_side_forward`
(`custom_calls`), whose handlers (`ffi_library`: C++ on the host, the
Triton kernel `triton_attention.side_forward` on CUDA) keep scores, masks,
softmax statistics and dropout decisions on chip:

  covered   either side (long: the l2l band or, on the full path, dense
            l2l, + l2g; global: g2g + g2l); RealFormer streams on any
            subset of the patterns (summed form, float32 or the compute
            dtype, running mean); dropout of the probabilities in training
            with the hash generator (`ExecutionConfig.dropout_rng='hash'`:
            the kernel draws the XLA path's masks)
  not yet   probabilities returned (analysis), recomputed streams
            (`recompute_residual_streams`), Philox dropout in training,
            relative ids on one pattern of a side only (never from ETC's
            features)

A side that is not covered runs on `attention_core.attend_side`, and the
first such fallback is logged with its reason. The kernels keep the
probabilities in float32 on chip, so `softmax_dtype` does not change a
fused side.

The gradient is a second custom call, `etc_side_backward`: the kernels
`side_backward_queries` and `side_backward_keys` recompute the
probabilities from the forward's row statistics (lse) and write the
gradients of q, the keys, the values, the per-id relative scores and the
previous running sums, never a score-sized tensor besides those sums'.
"""

from typing import Optional, Tuple

from absl import logging
import tensorflow as tf

from etc_realformer.kernels import custom_calls
from etc_realformer.kernels import ffi_library
from etc_realformer.kernels import reference
from etc_realformer.layers import attention_core as core
from etc_realformer.layers import blocking
from etc_realformer.layers import dropout as dropout_lib
from etc_realformer.layers.attention_pieces import PatternPair
from etc_realformer.layers.attention_pieces import SideInputs
from etc_realformer.layers.attention_pieces import SideMasks
from etc_realformer.layers.attention_pieces import SideOutputs

SIDE_FORWARD = "etc_side_forward"
SIDE_BACKWARD = "etc_side_backward"
MAX_IDS = 127  # relative ids travel as int8 codes (-1 - id when masked)
_DTYPES = (tf.float32, tf.bfloat16, tf.float16)


def uncovered_reason(spec: core.SideSpec, x: SideInputs[tf.Tensor]
                     ) -> Optional[str]:
  """Why the fused kernels do not compute this side (None: they do)."""
  if spec.return_probs:
    return "probabilities are returned"
  if x.sources:
    return "recomputed RealFormer streams (recompute_residual_streams)"
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
    return "relative ids on one pattern of the side only"
  if per_id is not None and per_id.shape[-2] > MAX_IDS:
    return f"{per_id.shape[-2]} relative ids (int8 codes: at most {MAX_IDS})"
  return None


def _stream_dtype(spec: core.SideSpec, dtype: tf.DType) -> tf.DType:
  """The running sums' dtype: the inputs' with `StreamSpec.low_precision`,
  else float32 (`attention_core`'s rule)."""
  return dtype if spec.streams.low_precision else tf.float32


def covers(spec: core.SideSpec, x: SideInputs[tf.Tensor]) -> bool:
  """Whether the fused kernels compute this side (module docstring)."""
  return uncovered_reason(spec, x) is None


def _rows(spec: core.SideSpec, t: Optional[tf.Tensor], axis: int
          ) -> Optional[tf.Tensor]:
  """Query blocks -> rows on the band side ([.., nb, b, ..] at `axis`)."""
  if t is None or not spec.band:
    return t
  return blocking.merge_axes(t, axis)


def _blocks(spec: core.SideSpec, t: Optional[tf.Tensor], axis: int
            ) -> Optional[tf.Tensor]:
  """Rows -> query blocks on the band side (the inverse of `_rows`)."""
  if t is None or not spec.band:
    return t
  return blocking.split_axis(t, axis, spec.block_len)


def fused_side(spec: core.SideSpec, x: SideInputs[tf.Tensor]
               ) -> SideOutputs[tf.Tensor]:
  """`attention_core.attend_side` of a whole side, as custom calls: the
  forward, and the backward in its gradient.

  Args:
    spec: the side (`covers(spec, x)`).
    x: its pieces in the core's layouts (`attention_pieces.SideInputs`).

  Returns:
    The context, and the new running sums of the carried patterns with
    `spec.streams.emit` (no probabilities).
  """
  ffi_library.load_into_tensorflow()
  q = _rows(spec, x.scores.q, 2)
  batch, heads, num_rows, size = q.shape.as_list()
  has_ids = x.scores.per_id is not None and x.masks.ids.first is not None
  carried = spec.is_carried
  reads = tuple(c and s is not None for c, s in zip(carried, x.sums))
  emits = tuple(c and spec.streams.emit for c in carried)
  stream_dtype = _stream_dtype(spec, q.dtype)
  mean = (1.0 / spec.streams.num_summed if spec.streams.running_mean and
          spec.streams.num_summed > 1 else 1.0)
  drop = spec.dropout
  dropout = drop.training and drop.rate > 0.0

  codes1, codes2 = attention_codes(spec, x.masks, has_ids)
  widths = (codes1.shape[-1] if not spec.band else 3 * spec.block_len,
            codes2.shape[-1])
  if dropout:
    seeds = tf.concat([dropout_lib.fold_seed(x.seed, drop.first_site + i)
                       for i in range(2)], 0)
  else:
    seeds = tf.zeros([4], tf.int32)
  placeholder = tf.zeros([1], tf.float32)
  constants = (codes1, codes2, tf.reshape(x.masks.valid, [batch, num_rows]))
  if has_ids:
    per_id = _rows(spec, x.scores.per_id, 1)  # [B, N, R, H]
  else:  # A shaped placeholder: the handler reads none of it.
    per_id = tf.zeros([batch, num_rows, 1, heads], tf.float32)
  prev = [_rows(spec, s, 2) if r else None for s, r in zip(x.sums, reads)]
  inputs = [q, _rows(spec, x.scores.keys.first, 2),
            _rows(spec, x.values.first, 2), x.scores.keys.second,
            x.values.second, per_id] + [p for p in prev if p is not None]
  results = [([batch, heads, num_rows, size], q.dtype),
             ([batch, heads, num_rows], tf.float32)]
  for emit, width in zip(emits, widths):
    results.append(([batch, heads, num_rows, width], stream_dtype) if emit
                   else ([1], tf.float32))
  attributes = {
      "band": spec.band, "block_len": spec.block_len if spec.band else 1,
      "has_ids": has_ids, "read_prev1": reads[0], "read_prev2": reads[1],
      "emit1": emits[0], "emit2": emits[1],
      "scale1": mean if carried[0] else 1.0,
      "scale2": mean if carried[1] else 1.0,
      "keep_threshold": (dropout_lib.keep_threshold(drop.rate) if dropout
                         else 0),
      "gain": dropout_lib.keep_gain(drop.rate, dropout),
      "by_rows": drop.by_rows}

  @tf.custom_gradient
  def fused(*args):
    it = iter(args[6:])
    prev_args = [next(it) if r else placeholder for r in reads]
    forward_args = (list(args[:6]) + list(constants) + prev_args + [seeds])
    outs = custom_calls.custom_call(SIDE_FORWARD, forward_args, results,
                                    attributes)
    ctx, lse = outs[:2]
    emitted = [o for o, e in zip(outs[2:], emits) if e]

    def grad(*upstream):
      it = iter(upstream[1:])
      dnew = [tf.cast(next(it), stream_dtype) if e else placeholder
              for e in emits]
      grads = custom_calls.custom_call(
          SIDE_BACKWARD, forward_args + [ctx, lse,
                                         tf.cast(upstream[0], q.dtype)] + dnew,
          [(a.shape.as_list(), a.dtype) for a in args[:6]] +
          [(p.shape.as_list(), stream_dtype) if r else ([1], tf.float32)
           for p, r in zip(prev, reads)] +
          [([batch, heads, num_rows], tf.float32)],  # delta (scratch)
          attributes)
      out = list(grads[:6])
      if not has_ids:
        out[5] = None  # the placeholder
      return out + [g for g, r in zip(grads[6:8], reads) if r]

    return [ctx] + emitted, grad

  outs = fused(*inputs)
  it = iter(outs[1:])
  sums = PatternPair(*(_blocks(spec, next(it), 2) if e else None
                       for e in emits))
  return SideOutputs(ctx=_blocks(spec, outs[0], 2), sums=sums)


def attention_codes(spec: core.SideSpec, masks: SideMasks[tf.Tensor],
                    has_ids: bool) -> Tuple[tf.Tensor, tf.Tensor]:
  """A side's masks and relative ids as the kernels' int8 codes.

  Per score (`reference.codes`): an unmasked key's relative id (0
  without ids), -1 - id for a masked key, NO_ID (-128) for a masked key
  without a relative term (band columns outside the window). First
  pattern: band [B, Lp, Wb] (the band layout, rows padded with NO_ID to
  `band_stride` bytes) or dense [B, N, K1]; second [B, N, K2]. ETC's masks
  are hard (adders 0 or -10000), so a code carries what the adder did.
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
    code = tf.where(adder == 0.0, tf.maximum(ids, 0),
                    tf.where(ids >= 0, -1 - ids, reference.NO_ID))
    code = tf.cast(_rows(spec, code, 1), tf.int8)
    if spec.band and index == 0:
      code = tf.pad(code, [[0, 0], [0, 0],
                           [0, reference.band_stride(b) - 3 * b]],
                    constant_values=reference.NO_ID)
    out.append(code)
  return out[0], out[1]


def attend_side(spec: core.SideSpec, x: SideInputs[tf.Tensor]
                ) -> SideOutputs[tf.Tensor]:
  """The whole side: fused where `covers`, else `attention_core` (the
  first such fallback is logged with its reason, so a user of the option
  sees where it does not act)."""
  reason = uncovered_reason(spec, x)
  if reason is None:
    return fused_side(spec, x)
  logging.log_first_n(logging.INFO,
                      "attention_kernel='fused': the %s side runs on the "
                      "XLA path: %s", 1, "/".join(spec.patterns), reason)
  return core.attend_side(spec, 0, blocking.dim(x.scores.q, 2), x)
