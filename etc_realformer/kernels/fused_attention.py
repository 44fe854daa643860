"""The attention core's sides as fused kernels (XLA custom calls).

With `ExecutionConfig(attention_kernel='fused')`, a layer traced for XLA
runs each side it can as one custom call (`custom_calls`) whose handlers
(`ffi_library`: C++ on the host, the Triton kernels of `triton_attention` on
CUDA) keep scores, masks and softmax statistics on chip. A side the kernels
do not cover yet runs on `attention_core.attend_side` as before:

  covered   the sparse long side (l2l band + l2g), no RealFormer stream on
            it, no dropout of its probabilities, probabilities not returned
  not yet   the global side, carried streams, dropout in training

The gradient of a fused side is, for now, that of the same side recomputed
by `attention_core.attend_side` from the custom call's inputs (the kernels'
backward pass comes with their backward kernels): exact, at the XLA path's
cost.
"""

from typing import Optional, Tuple

from absl import logging
import tensorflow as tf

from etc_realformer.kernels import custom_calls
from etc_realformer.kernels import ffi_library
from etc_realformer.kernels import reference
from etc_realformer.layers import attention_core as core
from etc_realformer.layers import blocking
from etc_realformer.layers.attention_pieces import PatternPair
from etc_realformer.layers.attention_pieces import ScoreInputs
from etc_realformer.layers.attention_pieces import SideInputs
from etc_realformer.layers.attention_pieces import SideMasks
from etc_realformer.layers.attention_pieces import SideOutputs

LONG_SIDE_FORWARD = "etc_long_side_forward"
MAX_IDS = 127  # relative ids travel as int8 codes
_DTYPES = (tf.float32, tf.bfloat16, tf.float16)


def uncovered_reason(spec: core.SideSpec, x: SideInputs[tf.Tensor]
                     ) -> Optional[str]:
  """Why the fused kernels do not compute this side (None: they do)."""
  if not spec.band:
    return "only the sparse long side is fused so far"
  if spec.return_probs:
    return "probabilities are returned"
  if any(spec.is_carried):
    return "RealFormer streams on the side are not fused yet"
  if spec.dropout.training and spec.dropout.rate > 0.0:
    return "attention dropout in training is not fused yet"
  q = x.scores.q
  d = q.shape[-1]
  if q.dtype not in _DTYPES:
    return f"dtype {q.dtype.name}"
  if not (q.shape.is_fully_defined() and
          all(k.shape.is_fully_defined() for k in x.scores.keys)):
    return "dynamic shapes"
  if d < 16 or d & (d - 1):
    return f"head size {d} (a power of two from 16)"
  per_id = x.scores.per_id
  if per_id is not None and per_id.shape[-2] > MAX_IDS:
    return f"{per_id.shape[-2]} relative ids (int8 codes: at most {MAX_IDS})"
  return None


def covers(spec: core.SideSpec, x: SideInputs[tf.Tensor]) -> bool:
  """Whether the fused kernels compute this side (module docstring)."""
  return uncovered_reason(spec, x) is None


def attend_long_side(spec: core.SideSpec, x: SideInputs[tf.Tensor]
                     ) -> SideOutputs[tf.Tensor]:
  """`attention_core.attend_side` of the whole sparse long side, fused.

  Args:
    spec: the long side (`covers(spec, x)`).
    x: its pieces: q [B, H, nb, b, D], band keys and values as padded
      blocks [B, H, nb + 2, b, D], global ones [B, H, G, D], per_id
      [B, nb, b, R, H] or None, masks in the blocked layout.

  Returns:
    The context <T>[B, H, nb, b, D] (no streams, no probabilities).
  """
  ffi_library.load_into_tensorflow()
  b = spec.block_len
  q = x.scores.q
  batch, heads, nb, _, d = q.shape.as_list()
  lp = nb * b
  masks = x.masks
  has_ids = x.scores.per_id is not None and masks.ids.first is not None

  def rows(t: tf.Tensor, axis: int) -> tf.Tensor:  # blocks -> rows
    return blocking.merge_axes(t, axis)

  global_len = x.scores.keys.second.shape[2]
  if has_ids:
    per_id = rows(x.scores.per_id, 1)  # [B, Lp, R, H]
  else:  # A shaped placeholder: the handler reads none of it.
    per_id = tf.zeros([batch, lp, 1, heads], tf.float32)
  codes_band, codes_global = attention_codes(masks, b, has_ids)
  constants = (codes_band, codes_global, tf.reshape(masks.valid, [batch, lp]))
  differentiable = (rows(q, 2), rows(x.scores.keys.first, 2),
                    rows(x.values.first, 2), x.scores.keys.second,
                    x.values.second, per_id)

  @tf.custom_gradient
  def fused(q_rows, k_band, v_band, k_global, v_global, per_id_rows):
    ctx, _ = custom_calls.custom_call(
        LONG_SIDE_FORWARD,
        (q_rows, k_band, v_band, k_global, v_global, per_id_rows) + constants,
        [([batch, heads, lp, d], q.dtype), ([batch, heads, lp], tf.float32)],
        {"block_len": b, "has_ids": has_ids})

    def grad(dctx):
      args = (q_rows, k_band, v_band, k_global, v_global, per_id_rows)
      with tf.GradientTape() as tape:
        tape.watch(args)
        ref = _reference(spec, x.masks, has_ids, nb, *args)
      return tape.gradient(ref, args, output_gradients=dctx)

    return ctx, grad

  ctx = fused(*differentiable)
  return SideOutputs(ctx=blocking.split_axis(ctx, 2, b))


def attention_codes(masks: SideMasks[tf.Tensor], block_len: int,
                    has_ids: bool) -> Tuple[tf.Tensor, tf.Tensor]:
  """The long side's masks and relative ids as the kernels' int8 codes.

  -1 where a key is masked (adder != 0), else its relative id (0 without
  ids): the band [B, Lp, Wb] (band layout, rows padded with -1 to
  `band_stride` bytes) and [B, Lp, G]. ETC's masks are hard (adders 0 or
  -10000), so a code carries what the adder did.
  """
  b = block_len
  add_band, add_global = masks.adders.first[:, 0], masks.adders.second[:, 0]
  batch, nb = add_band.shape[0], add_band.shape[1]
  if has_ids:
    # Window [B, nb, b, 2b - 1] -> band [B, nb, b, 3b] (as the XLA path's
    # skew of the relative scores); 0 outside the window, so ids + 1.
    band_ids = blocking.skew_right(masks.ids.first + 1, offset=1,
                                   width=3 * b) - 1
    global_ids = masks.ids.second
  else:
    band_ids = global_ids = 0
  band = tf.where(add_band == 0.0, band_ids, -1)
  band = tf.pad(tf.reshape(band, [batch, nb * b, 3 * b]),
                [[0, 0], [0, 0], [0, reference.band_stride(b) - 3 * b]],
                constant_values=-1)
  glob = tf.where(add_global == 0.0, global_ids, -1)
  glob = tf.reshape(glob, [batch, nb * b, -1])
  return tf.cast(band, tf.int8), tf.cast(glob, tf.int8)


def _reference(spec: core.SideSpec, masks: SideMasks[tf.Tensor],
               has_ids: bool, num_blocks: int, q_rows: tf.Tensor,
               k_band: tf.Tensor, v_band: tf.Tensor, k_global: tf.Tensor,
               v_global: tf.Tensor, per_id_rows: tf.Tensor) -> tf.Tensor:
  """The fused call's context [B, H, Lp, D] by `attention_core.attend_side`
  (the backward pass differentiates it)."""
  b = spec.block_len
  x = SideInputs(
      scores=ScoreInputs(
          blocking.split_axis(q_rows, 2, b),
          PatternPair(blocking.split_axis(k_band, 2, b), k_global),
          blocking.split_axis(per_id_rows, 1, b) if has_ids else None),
      values=PatternPair(blocking.split_axis(v_band, 2, b), v_global),
      masks=masks)
  out = core.attend_side(spec, 0, num_blocks, x)
  return blocking.merge_axes(out.ctx, 2)


def attend_side(spec: core.SideSpec, x: SideInputs[tf.Tensor]
                ) -> SideOutputs[tf.Tensor]:
  """The whole side: fused where `covers`, else `attention_core` (the
  first such fallback is logged with its reason, so a user of the option
  sees where it does not act)."""
  reason = uncovered_reason(spec, x)
  if reason is None:
    return attend_long_side(spec, x)
  logging.log_first_n(logging.INFO,
                      "attention_kernel='fused': the %s side runs on the "
                      "XLA path: %s", 1, "/".join(spec.patterns), reason)
  return core.attend_side(spec, 0, blocking.dim(x.scores.q, 2), x)

