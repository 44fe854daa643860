"""The fused CPU kernel of one query side's softmax (`side_softmax.cc`).

`side_softmax` computes, for one query side of ETC attention (long: l2l +
l2g; global: g2g + g2l), what `FusedGlobalLocalAttention` computes between
the score matrix products and the value matrix products: relative scores,
RealFormer streams, mask adders, one softmax over both pieces' keys, row
dropout and the cast to the compute dtype. Its gradient is one more fused
pass (`EtcSideSoftmaxGrad`). The TensorFlow path stays the reference (and
what runs under XLA, on accelerators and in exported SavedModels); see
`etc_realformer/kernels/build.py` for when the kernel is used.
"""

from typing import NamedTuple, Optional, Tuple

import tensorflow as tf

from etc_realformer.kernels import build


class SideOutputs(NamedTuple):
  """probs_a/probs_b: <T> dropped probabilities in the layouts of the raw
  scores (piece B with NQ rows); new_a/new_b: <float32> new streams or None."""
  probs_a: tf.Tensor
  probs_b: tf.Tensor
  new_a: Optional[tf.Tensor]
  new_b: Optional[tf.Tensor]


def _empty(dtype=tf.float32) -> tf.Tensor:
  """The placeholder the op takes for an absent optional input."""
  return tf.zeros([0], dtype)


def side_softmax(raw_a: tf.Tensor, raw_b: tf.Tensor,
                 adder_a: tf.Tensor, adder_b: tf.Tensor, valid: tf.Tensor,
                 *, band: bool, block_len: int = 1,
                 per_id: Optional[tf.Tensor] = None,
                 ids_a: Optional[tf.Tensor] = None,
                 ids_b: Optional[tf.Tensor] = None,
                 stream_a: Optional[tf.Tensor] = None,
                 stream_b: Optional[tf.Tensor] = None,
                 emit_a: bool = False, emit_b: bool = False,
                 num_summed: float = 1.0,
                 keys: Optional[tf.Tensor] = None, threshold: int = 0,
                 gain: float = 1.0, row_start: int = 0,
                 save_probs: bool = True) -> SideOutputs:
  """One query side's scores -> dropped probabilities (and new streams).

  Args:
    raw_a: <T>[B, H, NQ, KA] piece A's q.k scores (band: the blocked l2l
      scores with NQ = nb * b and KA = 3b; else g2g).
    raw_b: <T>[B, H, QB, KB] piece B's (l2g or g2l); QB <= NQ, missing rows
      are zero scores (the blocked layout's padding).
    adder_a, adder_b: <float32>[B, 1, NQ, K] mask adders.
    valid: <float32>[B, 1, NQ, 1]: 0 zeroes a query's probabilities.
    band: piece A is the l2l band (relative ids in the window layout).
    block_len: queries per dropout row (band: b = r + 1; else 1).
    per_id: <float32>[B, QR, R, H] relative scores per id (QR <= NQ rows).
    ids_a: <int32>[B, QR, 2b - 1] (band) or [B, QR, KA]; None: no relative
      term on piece A.
    ids_b: <int32>[B, QR, KB]; None: none on piece B.
    stream_a, stream_b: <float32>[B, H, NQ, K] the previous layers' running
      sums, or None.
    emit_a, emit_b: return the new running sums of that piece.
    num_summed: the running mean's divisor (1: the running sum).
    keys: <int32>[2, 2] the folded dropout seeds of pieces A and B
      (`fold_seed(seed, site)`); None when no dropout applies.
    threshold: keep an element iff its 16-bit number >= threshold (0: no
      dropout).
    gain: multiplies the probabilities (dropout's 1 / P(keep)).
    row_start: the first dropout row of these queries in the whole mask.
    save_probs: keep the float32 probabilities for the gradient (False for
      inference: a gradient, if one is asked for all the same, recomputes
      them).

  Returns:
    `SideOutputs`.
  """
  ops = build.load()
  use_rel_a = ids_a is not None and per_id is not None
  use_rel_b = ids_b is not None and per_id is not None
  if threshold and keys is None:
    raise ValueError("side_softmax: dropout needs keys")
  outs = ops.etc_side_softmax(
      raw_a=raw_a, raw_b=raw_b,
      per_id=per_id if (use_rel_a or use_rel_b) else _empty(),
      ids_a=ids_a if use_rel_a else _empty(tf.int32),
      ids_b=ids_b if use_rel_b else _empty(tf.int32),
      stream_a=stream_a if stream_a is not None else _empty(),
      stream_b=stream_b if stream_b is not None else _empty(),
      adder_a=adder_a, adder_b=adder_b, valid=valid,
      keys=keys if threshold else tf.zeros([2, 2], tf.int32),
      band=band, block_len=block_len, row_start=row_start,
      threshold=threshold, gain=gain, num_summed=float(num_summed),
      use_rel_a=use_rel_a, use_rel_b=use_rel_b,
      stream_in_a=stream_a is not None, stream_in_b=stream_b is not None,
      emit_a=emit_a, emit_b=emit_b, save_probs=save_probs)
  return SideOutputs(outs[0], outs[1], outs[2] if emit_a else None,
                     outs[3] if emit_b else None)


_ATTRS = ("band", "block_len", "row_start", "threshold", "gain",
          "num_summed", "use_rel_a", "use_rel_b", "stream_in_a",
          "stream_in_b", "emit_a", "emit_b")


def _sizes(raw_b: tf.Tensor, axis: int, per_id: tf.Tensor,
           per_id_axes: Tuple[int, int]) -> tf.Tensor:
  """<int32>[3]: rows of raw_b, rows and ids of per_id. Static where known:
  a Shape op would keep its (large) input alive until the backward pass."""
  sizes = [raw_b.shape[axis]] + [
      per_id.shape[a] if per_id.shape.rank == 4 else 0 for a in per_id_axes]
  if all(s is not None for s in sizes):
    return tf.constant(sizes, tf.int32)
  dynamic = [tf.shape(raw_b)[axis]] + [
      tf.shape(per_id)[a] if per_id.shape.rank == 4 else 0
      for a in per_id_axes]
  return tf.stack([tf.cast(x, tf.int32) for x in dynamic])


def _side_softmax_grad(op, d_probs_a, d_probs_b, d_new_a, d_new_b, *unused):
  """Gradient of `EtcSideSoftmax` (one fused pass, `EtcSideSoftmaxGrad`)."""
  attrs = {name: op.get_attr(name) for name in _ATTRS}
  raw_a, raw_b, per_id, ids_a, ids_b = op.inputs[:5]
  valid, keys = op.inputs[9], op.inputs[10]
  p_a, p_b = op.outputs[4:6]
  if not op.get_attr("save_probs"):
    # Run for inference, yet differentiated: the same op again, keeping them.
    again = build.load().etc_side_softmax(*op.inputs, save_probs=True,
                                          **attrs)
    p_a, p_b = again[4:6]

  def dense(grad, like):
    return tf.zeros_like(like) if grad is None else grad

  # float32: the raw scores' gradient equals the incoming stream's (same
  # dtype, same rows); one tensor serves both.
  f32 = raw_a.dtype == tf.float32
  share_a = f32 and attrs["stream_in_a"]
  share_b = (f32 and attrs["stream_in_b"] and raw_b.shape[2] is not None and
             raw_b.shape[2] == op.inputs[6].shape[2])

  grads = build.load().etc_side_softmax_grad(
      d_probs_a=dense(d_probs_a, op.outputs[0]),
      d_probs_b=dense(d_probs_b, op.outputs[1]),
      d_new_stream_a=(d_new_a if attrs["emit_a"] and d_new_a is not None
                      else _empty()),
      d_new_stream_b=(d_new_b if attrs["emit_b"] and d_new_b is not None
                      else _empty()),
      p_a=p_a, p_b=p_b, keys=keys, valid=valid,
      dims=_sizes(raw_b, 2, per_id, (1, 2)),
      ids_a=ids_a, ids_b=ids_b, share_a=share_a, share_b=share_b, **attrs)
  d_raw_a, d_raw_b, d_stream_a, d_stream_b, d_per_id = grads
  if share_a:
    d_raw_a = d_stream_a
  if share_b:
    d_raw_b = d_stream_b
  use_rel = attrs["use_rel_a"] or attrs["use_rel_b"]
  if use_rel:
    d_per_id.set_shape(per_id.shape)
  if not share_b:
    d_raw_b.set_shape(raw_b.shape)
  return [d_raw_a, d_raw_b, d_per_id if use_rel else None, None, None,
          d_stream_a if attrs["stream_in_a"] else None,
          d_stream_b if attrs["stream_in_b"] else None,
          None, None, None, None]


tf.RegisterGradient("EtcSideSoftmax")(_side_softmax_grad)
