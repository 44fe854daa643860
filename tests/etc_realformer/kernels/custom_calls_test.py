"""Typed-FFI custom calls from TensorFlow: the StableHLO text, and the
branch's host handlers (`etc_branch_forward`, and `etc_branch_backward` on its
outputs) called directly under jit_compile against the NumPy reference."""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.kernels import custom_calls
from etc_realformer.kernels import ffi_library
from etc_realformer.kernels import reference as ref


def test_tensor_type():
  assert custom_calls.tensor_type([2, 4], tf.float32) == "tensor<2x4xf32>"
  assert custom_calls.tensor_type([], tf.int32) == "tensor<i32>"
  assert custom_calls.tensor_type([3], tf.int8) == "tensor<3xi8>"
  with pytest.raises(ValueError, match="static shapes"):
    custom_calls.tensor_type([None, 4], tf.float32)
  with pytest.raises(ValueError, match="custom calls take"):
    custom_calls.tensor_type([2], tf.int64)


def test_module_text_is_one_typed_ffi_call():
  text = custom_calls.stablehlo_module(
      "my_target", ["tensor<2xf32>", "tensor<2xi8>"], ["tensor<2xf32>"],
      {"flag": True, "count": 3, "scale": 0.5})
  assert "func.func public @main(%platform_index: tensor<i32>, " \
         "%arg0: tensor<2xf32>, %arg1: tensor<2xi8>)" in text
  call = [line for line in text.splitlines()
          if "stablehlo.custom_call" in line]
  assert len(call) == 1
  assert "stablehlo.custom_call @my_target(%arg0, %arg1)" in call[0]
  assert "api_version = 4 : i32" in call[0]
  # Attributes sorted by name, typed as the handlers' .Attr<> read them.
  assert ("backend_config = {count = 3 : i64, flag = true, "
          "scale = 0.5 : f32}" in call[0])
  with pytest.raises(ValueError, match="attribute name"):
    custom_calls.stablehlo_module("t", [], ["tensor<f32>"], {"name": "x"})


SIDE_FORWARD = "etc_branch_forward"
_INPUTS = ("q", "k1", "v1", "k2", "v2")
_SOURCES = ("src_q", "src_k1", "src_k2")
_RANKED = ("codes1", "codes2", "valid")


def _operands(case: ref.BranchCase, pieces: Dict[str, np.ndarray],
              dtype: tf.DType, stream_dtype: tf.DType) -> List[tf.Tensor]:
  """The branch's operands in order, with the placeholders the graph passes
  for what is not read (per_id without ids: [B, N, 1, H]; streams not read
  and seeds without dropout: f32[1])."""
  placeholder = np.zeros([1], np.float32)
  args = [tf.constant(pieces[name], dtype) for name in _INPUTS]
  args.append(tf.constant(pieces["per_id"] if case.has_ids else np.zeros(
      [case.batch, case.rows, 1, case.num_heads], np.float32)))
  args += [tf.constant(pieces[name]) for name in _RANKED]
  for index in range(2):
    name = f"prev{index + 1}"
    args.append(tf.constant(pieces[name], stream_dtype)
                if case.reads_prev[index] and not case.num_sources
                else tf.constant(placeholder))
  for name, read in zip(_SOURCES, (True,) + tuple(case.reads_prev)):
    args.append(tf.constant(pieces[name], dtype)
                if case.num_sources and read else tf.constant(placeholder))
  args.append(tf.constant(pieces["seeds"] if case.dropout_rate > 0
                          else placeholder))
  return args


def _forward_results(case: ref.BranchCase, dtype: tf.DType,
                     stream_dtype: tf.DType):
  """(shape, dtype) of ctx, lse, new1, new2 (f32[1] where not emitted)."""
  shape = [case.batch, case.num_heads, case.rows]
  results = [(shape + [case.size_per_head], dtype), (shape, tf.float32)]
  for width, emitted in zip(case.widths, case.writes_new):
    results.append((shape + [width], stream_dtype) if emitted
                   else ([1], tf.float32))
  return results


def _attributes(case: ref.BranchCase):
  """The calls' attributes (both passes take the same)."""
  scale1, scale2 = case.scales
  return {
      "band": case.band, "block_len": case.block_len if case.band else 1,
      "has_ids": case.has_ids, "read_prev1": case.reads_prev[0],
      "read_prev2": case.reads_prev[1], "emit1": case.writes_new[0],
      "emit2": case.writes_new[1], "scale1": float(scale1),
      "scale2": float(scale2),
      "keep_threshold": ref.keep_threshold(case.dropout_rate),
      "gain": float(ref.keep_gain(case.dropout_rate)),
      "by_rows": case.by_rows, "sources": case.num_sources}


def _branch_call(case: ref.BranchCase, pieces: Dict[str, np.ndarray],
                 dtype: tf.DType = tf.float32,
                 stream_dtype: tf.DType = tf.float32):
  """The branch's custom call on `pieces` under jit_compile: (ctx, lse,
  new1, new2) as NumPy arrays in float32 (new_p None where not
  emitted)."""
  ffi_library.load_into_tensorflow()
  args = _operands(case, pieces, dtype, stream_dtype)
  results = _forward_results(case, dtype, stream_dtype)
  attributes = _attributes(case)

  @tf.function(jit_compile=True)
  def call(*inputs):
    return custom_calls.custom_call(SIDE_FORWARD, inputs, results, attributes)

  out = [tf.cast(x, tf.float32).numpy() for x in call(*args)]
  return out[0], out[1], tuple(
      x if emitted else None for x, emitted in zip(out[2:], case.writes_new))


def _rounded(pieces: Dict[str, np.ndarray], dtype: tf.DType,
             stream_dtype: tf.DType, case: ref.BranchCase
             ) -> Dict[str, np.ndarray]:
  """The pieces as the handler reads them (inputs and streams rounded)."""
  out = dict(pieces)
  for name in _INPUTS + _SOURCES + ("prev1", "prev2"):
    if name in out:
      cast = stream_dtype if name.startswith("prev") else dtype
      out[name] = tf.cast(tf.cast(out[name], cast), tf.float32).numpy()
  out.update(ref.source_sums(out, case))  # recomputed streams' sums
  return out


def _check(case: ref.BranchCase, dtype: tf.DType = tf.float32,
           stream_dtype: tf.DType = tf.float32, ctx_tolerance: float = 1e-5,
           new_tolerance: float = 1e-6, lse_tolerance: float = 1e-6,
           masked_rows: int = 2, pieces: Optional[Dict] = None):
  pieces = pieces or ref.branch_pieces(case, seed=2, masked_rows=masked_rows)
  ctx, lse, new = _branch_call(case, pieces, dtype, stream_dtype)
  want = ref.branch_forward(_rounded(pieces, dtype, stream_dtype, case), case)
  assert ref.relative_error(ctx, want.ctx) < ctx_tolerance
  live = np.broadcast_to(pieces["valid"][:, None] > 0, lse.shape)
  assert ref.relative_error(lse, want.lse, live) < lse_tolerance
  assert (ctx[0, :, -masked_rows:] == 0).all()  # fully masked rows
  for got, expected in zip(new, want.new):
    assert (got is None) == (expected is None)
    if got is not None:
      assert ref.relative_error(got, expected) < new_tolerance
  return want


@pytest.mark.parametrize("streams_and_dropout", [False, True])
def test_long_branch_with_ids_matches_the_reference(streams_and_dropout):
  # With streams: the first layer (emit only) and the band's dropout index
  # in row blocks of b queries.
  options = dict(carried=(True, True), has_prev=False, dropout_rate=0.1,
                 by_rows=True) if streams_and_dropout else {}
  case = ref.BranchCase.long_branch(
      batch=2, num_heads=2, num_blocks=3, block_len=4, global_len=5,
      size_per_head=16, num_ids=6, **options)
  want = _check(case)
  if streams_and_dropout:
    assert case.reads_prev == (False, False)
    assert case.writes_new == (True, True)
    assert not want.dropped[0].all() and not want.dropped[1].all()


def test_global_branch_with_streams_and_dropout_matches_the_reference():
  case = ref.BranchCase.global_branch(
      batch=2, num_heads=2, global_len=6, long_len=20, size_per_head=16,
      num_ids=6, carried=(True, True), has_prev=True, emit=True,
      running_mean=True, num_summed=3, dropout_rate=0.1, by_rows=True)
  assert case.scales == (1 / 3, 1 / 3)
  want = _check(case)
  # Dropout acted: some kept probability differs from its undropped one.
  assert any((d != p).any() for d, p in zip(want.dropped, want.probs))


def _dense_long_branch() -> ref.BranchCase:
  """The full path's long branch (dense l2l + l2g) without relative ids:
  one stream carried, the dropout index row-major."""
  return ref.BranchCase(batch=1, num_heads=2, band=False, num_rows=12,
                        first_len=12, second_len=4, size_per_head=16,
                        num_ids=5, has_ids=False, carried=(True, False),
                        has_prev=True, emit=True, dropout_rate=0.1,
                        by_rows=False)


def test_dense_long_branch_without_ids_in_bfloat16_matches_the_reference():
  # The streams in the compute dtype.
  _check(_dense_long_branch(), tf.bfloat16, tf.bfloat16,
         ctx_tolerance=2e-2, new_tolerance=1e-2, lse_tolerance=1e-5)


def test_long_branch_with_sources_matches_the_reference():
  # Recomputed streams: the previous sums made from three earlier layers'
  # queries and keys, none emitted, the running mean, dropout.
  case = ref.BranchCase.long_branch(
      batch=2, num_heads=2, num_blocks=3, block_len=4, global_len=5,
      size_per_head=16, num_ids=6, carried=(True, True), emit=False,
      num_sources=3, running_mean=True, num_summed=4, dropout_rate=0.1)
  _check(case)


@pytest.mark.parametrize("broken,message", [
    ("v1", "v1 has shape"), ("prev2", "prev2 has shape"),
    ("codes1", "codes1's rows"), ("src_k2", "src_k2 has shape")])
def test_branch_handler_rejects_operands_that_do_not_fit(broken, message):
  # The CUDA kernel indexes raw pointers: the handler checks every operand.
  case = ref.BranchCase.long_branch(
      batch=1, num_heads=2, num_blocks=2, block_len=4, global_len=3,
      size_per_head=16, num_ids=3, carried=(False, True), has_prev=True,
      emit=not broken.startswith("src"), num_sources=2 *
      broken.startswith("src"))
  p = ref.branch_pieces(case, seed=1)
  if broken == "codes1":  # rows not padded to 16 bytes
    p["codes1"] = np.ascontiguousarray(p["codes1"][..., :3 * case.block_len])
  else:
    p[broken] = np.ascontiguousarray(p[broken][:, :, :-1])  # a row short
  with pytest.raises(tf.errors.OpError, match=message):
    _branch_call(case, p)


# ------------------------------------------------------------ backward pass
SIDE_BACKWARD = "etc_branch_backward"
GRADIENTS = ("q", "k1", "v1", "k2", "v2", "per_id")


def _incoming(case: ref.BranchCase, seed: int = 5
              ) -> Tuple[np.ndarray, Tuple[Optional[np.ndarray], ...]]:
  """Random gradients of the context and of the emitted sums."""
  rng = np.random.default_rng(seed)
  shape = (case.batch, case.num_heads, case.rows)
  dctx = rng.normal(size=shape + (case.size_per_head,)).astype(np.float32)
  dnew = tuple(rng.normal(size=shape + (width,)).astype(np.float32)
               if emitted else None
               for width, emitted in zip(case.widths, case.writes_new))
  return dctx, dnew


def _backward_call(case: ref.BranchCase, pieces: Dict[str, np.ndarray],
                   dctx: np.ndarray, dnew: Tuple[Optional[np.ndarray], ...],
                   dtype: tf.DType = tf.float32,
                   stream_dtype: tf.DType = tf.float32) -> Dict[str, Any]:
  """The forward call, then the backward call on its ctx and lse (as the
  graph's gradient runs them), under jit_compile: the gradients by name
  as float32 NumPy arrays (prev1, prev2: None where not read), and the
  scratch delta."""
  ffi_library.load_into_tensorflow()
  args = _operands(case, pieces, dtype, stream_dtype)
  grads_in = [tf.constant(dctx, dtype)] + [
      tf.constant(g, stream_dtype) if g is not None
      else tf.zeros([1], tf.float32) for g in dnew]
  forward = _forward_results(case, dtype, stream_dtype)
  backward = [(a.shape.as_list(), a.dtype) for a in args[:6]]
  for index, width in enumerate(case.widths):
    # The read sums' gradients (float32 where the sources make the sums).
    prev_dtype = tf.float32 if case.num_sources else stream_dtype
    backward.append(([case.batch, case.num_heads, case.rows, width],
                     prev_dtype) if case.reads_prev[index]
                    else ([1], tf.float32))
  backward.append(([case.batch, case.num_heads, case.rows], tf.float32))
  attributes = _attributes(case)

  @tf.function(jit_compile=True)
  def call(operands, incoming):
    ctx, lse, _, _ = custom_calls.custom_call(SIDE_FORWARD, operands,
                                              forward, attributes)
    return custom_calls.custom_call(
        SIDE_BACKWARD, list(operands) + [ctx, lse] + list(incoming),
        backward, attributes)

  out = [tf.cast(x, tf.float32).numpy() for x in call(args, grads_in)]
  grads: Dict[str, Any] = dict(zip(GRADIENTS, out[:6]))
  for index in range(2):
    grads[f"prev{index + 1}"] = (out[6 + index] if case.reads_prev[index]
                                 else None)
  grads["delta"] = out[8]
  return grads


def _check_backward(case: ref.BranchCase, dtype: tf.DType = tf.float32,
                    stream_dtype: tf.DType = tf.float32,
                    tolerance: float = 1e-5, stream_tolerance: float = 1e-5):
  pieces = ref.branch_pieces(case, seed=4, masked_rows=2)
  dctx, dnew = _incoming(case)
  got = _backward_call(case, pieces, dctx, dnew, dtype, stream_dtype)
  # The reference reads what the handlers read: the rounded inputs and
  # streams, and the incoming gradients in their types.
  rounded = _rounded(pieces, dtype, stream_dtype, case)
  dctx = tf.cast(tf.cast(dctx, dtype), tf.float32).numpy()
  dnew = tuple(None if g is None else
               tf.cast(tf.cast(g, stream_dtype), tf.float32).numpy()
               for g in dnew)
  fwd = ref.branch_forward(rounded, case)
  want = ref.branch_backward(rounded, case, fwd, dctx, dnew)
  for name in GRADIENTS[:5]:
    assert np.isfinite(got[name]).all(), name
    assert ref.relative_error(got[name], getattr(want, name)) < tolerance, (
        name)
  if case.has_ids:
    assert ref.relative_error(got["per_id"], want.per_id) < tolerance
  else:  # the placeholder's gradient
    assert got["per_id"].shape == (case.batch, case.rows, 1, case.num_heads)
    assert not got["per_id"].any()
  for index, prev in enumerate(want.prev):
    name = f"prev{index + 1}"
    assert (got[name] is None) == (prev is None)
    if prev is not None:
      assert ref.relative_error(got[name], prev) < stream_tolerance, name
  # delta = dctx . ctx per row, the context as the forward wrote it.
  assert ref.relative_error(got["delta"], (dctx * fwd.ctx).sum(-1)) < (
      max(tolerance, 1e-5))
  return want


def test_long_branch_backward_with_streams_and_dropout_matches_the_reference():
  # A middle layer: both streams read and emitted, the running mean, the
  # band's dropout index in row blocks of b queries.
  case = ref.BranchCase.long_branch(
      batch=2, num_heads=2, num_blocks=3, block_len=4, global_len=5,
      size_per_head=16, num_ids=6, carried=(True, True), has_prev=True,
      emit=True, running_mean=True, num_summed=3, dropout_rate=0.1,
      by_rows=True)
  want = _check_backward(case)
  assert want.prev[0] is not None and want.prev[1] is not None
  assert np.abs(want.per_id).max() > 0


def test_global_branch_backward_with_streams_matches_the_reference():
  # The last layer of a model that carries g2l alone: its sum read, none
  # emitted; the dropout index row-major over the whole tensor.
  case = ref.BranchCase.global_branch(
      batch=2, num_heads=2, global_len=6, long_len=20, size_per_head=16,
      num_ids=6, carried=(False, True), has_prev=True, emit=False,
      dropout_rate=0.2, by_rows=False)
  want = _check_backward(case)
  assert want.prev[0] is None and want.prev[1] is not None


def test_global_branch_backward_with_sources_matches_the_reference():
  # Recomputed streams on both patterns, bfloat16 inputs: dq, dk, dv of
  # the layer's own inputs, and the gradient of the sums the sources made.
  case = ref.BranchCase.global_branch(
      batch=2, num_heads=2, global_len=6, long_len=20, size_per_head=16,
      num_ids=6, carried=(True, True), emit=False, num_sources=2,
      dropout_rate=0.1, by_rows=False)
  want = _check_backward(case, tf.bfloat16, tolerance=2e-2,
                         stream_tolerance=2e-2)
  assert want.prev[0] is not None and want.prev[1] is not None


def test_dense_backward_without_ids_in_bfloat16_matches_the_reference():
  # The stream in the compute dtype.
  _check_backward(_dense_long_branch(), tf.bfloat16, tf.bfloat16,
                  tolerance=1e-2, stream_tolerance=1e-2)


def test_backward_handler_rejects_an_incoming_gradient_that_does_not_fit():
  case = ref.BranchCase.long_branch(
      batch=1, num_heads=2, num_blocks=2, block_len=4, global_len=3,
      size_per_head=16, num_ids=3, carried=(True, False), has_prev=True,
      emit=True)
  pieces = ref.branch_pieces(case, seed=1)
  dctx, dnew = _incoming(case)
  # The band's gradient with the dense layout's width (K1 = N + 2b).
  short = np.zeros(dnew[0].shape[:3] + (case.rows + 2 * case.block_len,),
                   np.float32)
  with pytest.raises(tf.errors.OpError,
                     match="etc_branch_backward: dnew1 has shape"):
    _backward_call(case, pieces, dctx, (short, None))
