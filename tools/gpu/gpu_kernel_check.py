r"""Checks and times the fused kernels' FFI handlers through jaxlib alone.

    python -m tools.gpu.gpu_kernel_check --library=DIR/libetc_attention_ffi.so \
        [--device=gpu] [--dtypes=float32,bfloat16,float16] [--low_streams] \
        [--passes=fwd,bwd] [--output_jsonl=FILE]

For each input dtype, the custom call `etc_branch_forward` on random pieces
(`etc_realformer/kernels/reference.py`: several query tiles, a block length
that divides no tile, hard masks, fully masked rows) against the float64
NumPy reference `branch_forward`: the long branch (band + global keys) and the
global branch (dense global + long keys), each with both patterns' RealFormer
streams carried, read and emitted (running mean) and the hash dropout
(rate 0.1), the long branch with recomputed streams (the previous sums made
from three earlier layers' queries and keys), and the long branch without
any of them nor relative ids. Per
case the relative error of the context, of the row statistic (valid rows)
and of the new running sums, and whether any value is not finite or a
fully masked row is not zero. Then, per case, the gradient's call
`etc_branch_backward` on the forward call's outputs, with random incoming
gradients of the context and the emitted sums, against `branch_backward`:
the relative error of every gradient (q, the keys and values of both
patterns, the per-id relative scores, the previous sums read). Then the
calls at the benchmark's shape (12 heads, D = 64, batch 4, bfloat16,
relative vocabulary 32; long branch: L = 4096 padded to blocks of r + 1 =
85, G = 256; global branch: G = 256 queries over 256 global and 4096 long
keys), with the streams and dropout (summed, and recomputed from the 11
earlier layers of the twelfth) and without: the forward alone, the
backward alone and the two in one program (a training step's), each with
its time, and the bytes it must move and the products it must compute
over that time. One JSON record per line (printed, and appended to
`--output_jsonl`; `tools/gpu/gpu_summary.py` tabulates them).

The cubins it needs are the default build's (`tools/kernels/build_kernels.py`;
float32 streams, or the inputs' dtype with `--low_streams` and a build with
`--stream_dtypes=low`; `--passes=fwd` for a build of the forward alone).
On the CPU (`--device=cpu`) it runs the host handlers: the same check on
any machine. Neither TensorFlow nor the package is imported (the GPU
machine has only jax): the kernel modules come without the package
(`tools.kernels.standalone`).
"""

import argparse
import json
import os
import pathlib
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from tools.bench import timing
from tools.gpu import xla_runner
from tools.kernels import standalone

with standalone.bare_packages():
  from etc_realformer.kernels import format as kernel_format  # pylint: disable=g-import-not-at-top
  from etc_realformer.kernels import reference  # pylint: disable=g-import-not-at-top
  from etc_realformer.kernels import variants as kernel_variants  # pylint: disable=g-import-not-at-top

TARGET = kernel_format.FORWARD_TARGET
BACKWARD_TARGET = kernel_format.BACKWARD_TARGET
# Relative errors allowed: the context per input dtype (float32 products
# in IEEE float32), the row statistic, the new running sums (float32, or
# rounded to the inputs' dtype).
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 3e-3}
LSE_TOLERANCE = 1e-5
STREAM_TOLERANCE = {"float32": 1e-5, "bfloat16": 1e-2, "float16": 2e-3}
# Every gradient's, per input dtype (the interpreter tests'): the score
# gradients are rounded to it for the products, and delta reads the
# context as the forward wrote it.
GRAD_TOLERANCE = {"float32": 1e-5, "bfloat16": 3e-2, "float16": 5e-3}
GRADIENTS = ("q", "k1", "v1", "k2", "v2", "per_id", "prev1", "prev2")
PASSES = ("fwd", "bwd")
INPUTS = ("q", "k1", "v1", "k2", "v2")
STREAMS = dict(carried=(True, True), has_prev=True, emit=True,
               running_mean=True, num_summed=3, dropout_rate=0.1,
               by_rows=True)
SOURCES = ("src_q", "src_k1", "src_k2")
# The operands before the incoming gradients (`operands`).
NUM_OPERANDS = 15


def recomputed(streams: Dict[str, Any], num_sources: int) -> Dict[str, Any]:
  """`streams` of a layer with recomputed streams: the sums of
  `num_sources` earlier layers read, none emitted."""
  return dict(streams, emit=False, num_sources=num_sources,
              num_summed=num_sources + 1)


def _branch_name(case) -> str:
  return "long" if case.band else "global"


def _label(case, kernel: str = "branch_forward") -> str:
  """The record's kernel: <kernel>[<branch>(,streams)(,dropout)]; kernel
  branch_forward, branch_backward or branch_forward_backward."""
  parts = [_branch_name(case)]
  if any(case.carried):
    parts.append(f"sources={case.num_sources}" if case.num_sources
                 else "streams")
  if case.dropout_rate > 0:
    parts.append("dropout")
  return f"{kernel}[{','.join(parts)}]"


def variant(case, dtype_name: str, low_streams: bool,
            kernel: str = kernel_variants.FORWARD, pattern: int = 0) -> str:
  """The cubin the CUDA handlers launch for `case`: the forward's, the
  backward's queries kernel, or its keys kernel of `pattern` (1, 2);
  aligned for the case's lengths (`main` names the plain one instead
  where the build lacks it: `kernel_variants.launched_name`)."""
  ids = case.num_ids if case.has_ids else 0
  flags = case.reads_prev + case.writes_new
  if pattern:
    flags = (flags[pattern - 1], flags[pattern + 1])
  read = "s" if case.num_sources else "1"
  digits = [read if f else "0" for f in flags[:len(flags) // 2]] + [
      "1" if f else "0" for f in flags[len(flags) // 2:]]
  wanted = kernel_variants.Variant(
      dtype_name, case.size_per_head, kernel_variants.padded_ids(ids),
      case.band, "".join(digits), low_streams, case.dropout_rate > 0,
      case.by_rows, kernel, pattern)
  b = case.block_len if case.band else 1
  wanted = wanted.for_lengths(
      case.rows, case.rows + 2 * b if case.band else case.first_len,
      case.second_len, b)
  return wanted.name


def backward_variants(case, dtype_name: str, low_streams: bool
                      ) -> List[str]:
  """The backward's three cubins: queries, then each pattern's keys."""
  return ([variant(case, dtype_name, low_streams, kernel_variants.QUERIES)] +
          [variant(case, dtype_name, low_streams, kernel_variants.KEYS, p)
           for p in (1, 2)])


def attributes(reference, case) -> Dict[str, Any]:
  """The call's attributes, typed as the handler reads them."""
  scale1, scale2 = case.scales
  return {"band": bool(case.band),
          "block_len": np.int64(case.block_len if case.band else 1),
          "has_ids": bool(case.has_ids),
          "read_prev1": bool(case.reads_prev[0]),
          "read_prev2": bool(case.reads_prev[1]),
          "emit1": bool(case.writes_new[0]),
          "emit2": bool(case.writes_new[1]),
          "scale1": np.float32(scale1), "scale2": np.float32(scale2),
          "keep_threshold": np.int64(reference.keep_threshold(
              case.dropout_rate)),
          "gain": np.float32(reference.keep_gain(case.dropout_rate)),
          "by_rows": bool(case.by_rows),
          "sources": np.int64(case.num_sources)}


def _as_read(case, pieces: Dict[str, np.ndarray], args) -> Dict[str, Any]:
  """The pieces as the handlers read them: the inputs and the previous
  sums rounded to the operands' dtypes (`args`, in `operands` order)."""
  rounded = dict(pieces)
  for i, name in enumerate(INPUTS):
    rounded[name] = np.asarray(args[i], np.float32)
  if case.num_sources:  # the sums the reference reads, of the rounded
    for i, name in enumerate(SOURCES):
      rounded[name] = np.asarray(args[11 + i], np.float32)
    rounded.update(reference.source_sums(rounded, case))
    return rounded
  for index in range(2):
    if case.reads_prev[index]:
      rounded[f"prev{index + 1}"] = np.asarray(args[9 + index], np.float32)
  return rounded


def operands(case, pieces, dtype, stream_dtype) -> List[Any]:
  """The call's operands in order, with the placeholders the graph passes
  for what the call does not read (per_id without ids: [B, N, 1, H];
  streams not read (with sources: none), the sources without them, and
  seeds without dropout: f32[1])."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  placeholder = np.zeros([1], np.float32)
  out = [jnp.asarray(pieces[n], dtype) for n in INPUTS]
  out.append(pieces["per_id"] if case.has_ids else np.zeros(
      [case.batch, case.rows, 1, case.num_heads], np.float32))
  out += [pieces["codes1"], pieces["codes2"], pieces["valid"]]
  for index in range(2):
    out.append(jnp.asarray(pieces[f"prev{index + 1}"], stream_dtype)
               if case.reads_prev[index] and not case.num_sources
               else placeholder)
  for name, read in zip(SOURCES, (True,) + tuple(case.reads_prev)):
    out.append(jnp.asarray(pieces[name], dtype)
               if case.num_sources and read else placeholder)
  out.append(pieces["seeds"] if case.dropout_rate > 0 else placeholder)
  return out


def branch_call(reference, case, dtype, stream_dtype):
  """A jitted `etc_branch_forward(*operands) -> (ctx, lse, new1, new2)`."""
  import jax  # pylint: disable=g-import-not-at-top
  shape = (case.batch, case.num_heads, case.rows)
  results = [jax.ShapeDtypeStruct(shape + (case.size_per_head,), dtype),
             jax.ShapeDtypeStruct(shape, np.float32)]
  for width, emitted in zip(case.widths, case.writes_new):
    results.append(jax.ShapeDtypeStruct(shape + (width,), stream_dtype)
                   if emitted else jax.ShapeDtypeStruct((1,), np.float32))
  call = jax.ffi.ffi_call(TARGET, tuple(results))
  attrs = attributes(reference, case)
  return jax.jit(lambda *args: call(*args, **attrs))


def backward_call(reference, case, dtype, stream_dtype):
  """A jitted `etc_branch_backward(*operands, ctx, lse, dctx, dnew1, dnew2)
  -> (dq, dk1, dv1, dk2, dv2, dper_id, dprev1, dprev2, delta)`."""
  import jax  # pylint: disable=g-import-not-at-top
  shape = (case.batch, case.num_heads, case.rows)
  d = case.size_per_head
  k1_rows = case.rows + 2 * case.block_len if case.band else case.first_len
  results = [jax.ShapeDtypeStruct(shape + (d,), dtype)]
  for rows in (k1_rows, k1_rows, case.second_len, case.second_len):
    results.append(jax.ShapeDtypeStruct(shape[:2] + (rows, d), dtype))
  results.append(jax.ShapeDtypeStruct(
      (case.batch, case.rows, case.num_ids if case.has_ids else 1,
       case.num_heads), np.float32))
  # The read sums' gradients (float32 for the sums the sources make).
  sums_dtype = np.float32 if case.num_sources else stream_dtype
  for width, read in zip(case.widths, case.reads_prev):
    results.append(jax.ShapeDtypeStruct(shape + (width,), sums_dtype)
                   if read else jax.ShapeDtypeStruct((1,), np.float32))
  results.append(jax.ShapeDtypeStruct(shape, np.float32))  # delta
  call = jax.ffi.ffi_call(BACKWARD_TARGET, tuple(results))
  attrs = attributes(reference, case)
  return jax.jit(lambda *args: call(*args, **attrs))


def incoming(case, dtype, stream_dtype, seed: int) -> List[Any]:
  """Random gradients of the context and of the emitted sums, in their
  types (f32[1] placeholders where a sum is not emitted)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  shape = (case.batch, case.num_heads, case.rows)
  out = [jnp.asarray(rng.standard_normal(
      shape + (case.size_per_head,), np.float32), dtype)]
  for width, emitted in zip(case.widths, case.writes_new):
    out.append(jnp.asarray(rng.standard_normal(
        shape + (width,), np.float32), stream_dtype) if emitted
               else np.zeros([1], np.float32))
  return out


def training_call(reference, case, dtype, stream_dtype):
  """A jitted forward and backward in one program (a training step's):
  `(*operands, dctx, dnew1, dnew2) -> the gradients`."""
  import jax  # pylint: disable=g-import-not-at-top
  forward = branch_call(reference, case, dtype, stream_dtype)
  backward = backward_call(reference, case, dtype, stream_dtype)

  def step(*args):
    operands, grads_in = args[:NUM_OPERANDS], args[NUM_OPERANDS:]
    ctx, lse = forward(*operands)[:2]
    return backward(*operands, ctx, lse, *grads_in)

  return jax.jit(step)


def check_cases(reference) -> List[Any]:
  """The checked problems: the long branch and the global branch with streams
  and dropout, then the long branch with neither nor relative ids. The
  first two have lengths of 16 as the benchmark's do (G; G and L), so a
  build aligned for them (`build_kernels --aligned_for`, `--modules`)
  has its aligned cubins checked, the others its plain ones."""
  sizes = dict(batch=2, num_heads=2, size_per_head=64, num_ids=32)
  return [
      reference.BranchCase.long_branch(
          num_blocks=3, block_len=85, global_len=96, **sizes, **STREAMS),
      reference.BranchCase.global_branch(global_len=192, long_len=320, **sizes,
                                         **STREAMS),
      reference.BranchCase.long_branch(
          num_blocks=3, block_len=85, global_len=100, **sizes,
          **recomputed(STREAMS, 3)),
      reference.BranchCase.long_branch(
          num_blocks=3, block_len=85, global_len=100, has_ids=False, **sizes)]


def check(reference, device, dtype_name: str, case,
          low_streams: bool = False) -> Dict[str, Any]:
  """The custom call against the reference on one random problem."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  dtype = jnp.dtype(dtype_name)
  stream_dtype = dtype if low_streams else jnp.dtype(np.float32)
  pieces = reference.branch_pieces(case, seed=7)
  args = [jax.device_put(x, device)
          for x in operands(case, pieces, dtype, stream_dtype)]
  rounded = _as_read(case, pieces, args)
  out = branch_call(reference, case, dtype, stream_dtype)(*args)
  ctx, lse = np.asarray(out[0], np.float32), np.asarray(out[1])
  new = [np.asarray(x, np.float32) for x in out[2:]]
  want = reference.branch_forward(rounded, case)
  ctx_error = reference.relative_error(ctx, want.ctx)
  # A query with no unmasked key (valid 0) gets zeros; its statistic is
  # compared on the valid rows only.
  valid_rows = np.broadcast_to(pieces["valid"][:, None] > 0, lse.shape)
  lse_error = reference.relative_error(lse, want.lse, valid_rows)
  new_errors = [reference.relative_error(x, w)
                for x, w in zip(new, want.new) if w is not None]
  new_error = max(new_errors) if new_errors else 0.0
  finite = bool(np.isfinite(ctx).all() and np.isfinite(lse).all() and
                all(np.isfinite(x).all()
                    for x, w in zip(new, want.new) if w is not None))
  masked_zero = not ctx[0, :, -3:].any()
  stream_tolerance = STREAM_TOLERANCE[dtype_name if low_streams
                                      else "float32"]
  return {"record_type": "kernel_check", "kernel": _label(case),
          "dtype": dtype_name, "has_ids": case.has_ids,
          "branch": _branch_name(case), "streams": any(case.carried),
          "num_sources": case.num_sources,
          "low_streams": low_streams and dtype_name != "float32",
          "dropout_rate": case.dropout_rate, "by_rows": case.by_rows,
          "variant": variant(case, dtype_name, low_streams),
          "device": str(device), "ctx_relative_error": ctx_error,
          "lse_relative_error": lse_error,
          "new_relative_error": new_error, "finite": finite,
          "masked_rows_zero": masked_zero,
          "ok": (finite and masked_zero and lse_error < LSE_TOLERANCE and
                 new_error < stream_tolerance and
                 ctx_error < TOLERANCE[dtype_name])}


def check_backward(reference, device, dtype_name: str, case,
                   low_streams: bool = False) -> Dict[str, Any]:
  """The gradient's call on the forward call's outputs against the
  reference's gradients, on one random problem."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  dtype = jnp.dtype(dtype_name)
  stream_dtype = dtype if low_streams else jnp.dtype(np.float32)
  pieces = reference.branch_pieces(case, seed=7)
  args = [jax.device_put(x, device)
          for x in operands(case, pieces, dtype, stream_dtype)]
  grads_in = [jax.device_put(x, device)
              for x in incoming(case, dtype, stream_dtype, seed=11)]
  fwd = branch_call(reference, case, dtype, stream_dtype)(*args)
  out = backward_call(reference, case, dtype, stream_dtype)(
      *args, fwd[0], fwd[1], *grads_in)
  got = {name: np.asarray(x, np.float32) for name, x in zip(GRADIENTS, out)}
  # The reference reads what the handlers read: the rounded inputs and
  # streams, and the incoming gradients in their types.
  rounded = _as_read(case, pieces, args)
  want_fwd = reference.branch_forward(rounded, case)
  dnew = tuple(np.asarray(g, np.float32) if emitted else None
               for g, emitted in zip(grads_in[1:], case.writes_new))
  want = reference.branch_backward(rounded, case, want_fwd,
                                   np.asarray(grads_in[0], np.float32), dnew)
  errors = {}
  for name in GRADIENTS:
    if name.startswith("prev"):
      expected = want.prev[int(name[-1]) - 1]
    else:
      expected = getattr(want, name)
    if expected is None or (name == "per_id" and not case.has_ids):
      continue
    errors[name] = reference.relative_error(got[name], expected)
  finite = all(bool(np.isfinite(got[name]).all()) for name in errors)
  # Without ids the placeholder's gradient is zeros.
  ids_zero = case.has_ids or not got["per_id"].any()
  ctx = np.asarray(fwd[0], np.float32)
  ctx_error = reference.relative_error(ctx, want_fwd.ctx)
  valid_rows = np.broadcast_to(pieces["valid"][:, None] > 0,
                               want_fwd.lse.shape)
  lse_error = reference.relative_error(np.asarray(fwd[1]), want_fwd.lse,
                                       valid_rows)
  grad_error = max(errors.values())
  return {"record_type": "kernel_check",
          "kernel": _label(case, "branch_backward"),
          "dtype": dtype_name, "has_ids": case.has_ids,
          "branch": _branch_name(case), "streams": any(case.carried),
          "num_sources": case.num_sources,
          "low_streams": low_streams and dtype_name != "float32",
          "dropout_rate": case.dropout_rate, "by_rows": case.by_rows,
          "variant": backward_variants(case, dtype_name, low_streams)[0],
          "variants": backward_variants(case, dtype_name, low_streams),
          "device": str(device),
          # The forward's outputs the gradient reads.
          "ctx_relative_error": ctx_error, "lse_relative_error": lse_error,
          "grad_relative_errors": errors, "grad_relative_error": grad_error,
          "finite": finite, "per_id_zero_without_ids": ids_zero,
          "ok": (finite and ids_zero and ctx_error < TOLERANCE[dtype_name]
                 and lse_error < LSE_TOLERANCE and
                 grad_error < GRAD_TOLERANCE[dtype_name])}


def _forward_operands(case, dtype_bytes: int, stream_bytes: int
                      ) -> Dict[str, float]:
  """Bytes of the forward call's operands and of its per-score pieces:
  inputs (q, keys, values, per_id with ids, valid, the codes, the seeds),
  the running sums read (prev) and written (new), per_head (one [N, D]
  tensor of all heads) and cells (B * H * N)."""
  bsz, h, n, d = case.batch, case.num_heads, case.rows, case.size_per_head
  c1, c2 = case.widths
  k1_rows = n + 2 * case.block_len if case.band else case.first_len
  codes1 = (kernel_format.band_stride(case.block_len) if case.band
            else c1)
  per_head = bsz * h * d * dtype_bytes
  cells = bsz * h * n
  per_id = 4 * bsz * n * (case.num_ids * h if case.has_ids else 0)
  # per_id (with ids) and valid in float32, one int8 code per score.
  inputs = (per_head * (n + 2 * k1_rows + 2 * c2) + per_id + 4 * bsz * n +
            bsz * n * (codes1 + c2) + (16 if case.dropout_rate > 0 else 0))
  sums = {kind: sum(stream_bytes * cells * c
                    for c, f in zip(case.widths, flags) if f)
          for kind, flags in (("prev", case.reads_prev),
                              ("new", case.writes_new))}
  # Recomputed streams: the sums are made from the sources (read once),
  # one more product over the read patterns' scores, J heads deep.
  j = case.num_sources
  sources = (per_head * j * (n + sum(rows for rows, f in zip(
      (k1_rows, c2), case.reads_prev) if f)) if j else 0)
  source_flops = 2 * cells * j * d * sum(
      c for c, f in zip(case.widths, case.reads_prev) if f)
  # The read sums' gradient (float32 with sources), written by the backward.
  dprev = sum((4 if j else stream_bytes) * cells * c
              for c, f in zip(case.widths, case.reads_prev) if f)
  return {"inputs": inputs + sources, "prev": 0 if j else sums["prev"],
          "new": sums["new"], "dprev": dprev, "source_flops": source_flops,
          "per_head": per_head, "cells": cells, "per_id": per_id,
          "keys_and_values": per_head * (2 * k1_rows + 2 * c2)}


def side_traffic(case, dtype_bytes: int, stream_bytes: int = 4
                 ) -> Dict[str, float]:
  """The fewest bytes one branch's forward moves (each input read once,
  each output written once) and its products' FLOPs (q.k and p.v over
  every score of the branch: 3b band columns on the band)."""
  o = _forward_operands(case, dtype_bytes, stream_bytes)
  read = o["inputs"] + o["prev"]
  written = o["per_head"] * case.rows + 4 * o["cells"] + o["new"]
  flops = (4 * o["cells"] * sum(case.widths) * case.size_per_head +
           o["source_flops"])
  return {"bytes": float(read + written), "flops": float(flops)}


def branch_backward_traffic(case, dtype_bytes: int, stream_bytes: int = 4
                            ) -> Dict[str, float]:
  """The same floor figures of the gradient's call: the forward's inputs,
  its context and row statistic, and the incoming gradients (of the
  context, of the emitted sums) read once; every gradient (q, the keys and
  values, the per-id scores with ids, the previous sums read) and each
  row's delta written once. FLOPs: the five products over every score
  (q.k recomputed, dctx.v, ds.k, ds.q, p.dctx; the kernels recompute the
  first two in each of their passes)."""
  o = _forward_operands(case, dtype_bytes, stream_bytes)
  n, cells = case.rows, o["cells"]
  read = (o["inputs"] + o["prev"] +
          2 * o["per_head"] * n + 4 * cells +  # ctx, dctx; lse
          o["new"])  # the emitted sums' gradients
  written = (o["per_head"] * n + o["keys_and_values"] + o["per_id"] +
             o["dprev"] + 4 * cells)  # dq, dk, dv, dper_id, dprev; delta
  flops = (10 * cells * sum(case.widths) * case.size_per_head +
           o["source_flops"])
  return {"bytes": float(read + written), "flops": float(flops)}


def benchmark_case(reference, branch: str, streams_and_dropout: bool,
                   batch: int = 4, long_len: int = 4096,
                   local_radius: int = 84, global_len: int = 256,
                   has_ids: bool = True, num_sources: int = 0):
  """The benchmark's shape of one branch (12 heads, D = 64, vocabulary 32);
  `num_sources` > 0: the streams recomputed from that many layers."""
  streams = STREAMS
  if num_sources:
    streams = recomputed(STREAMS, num_sources)
  sizes = dict(batch=batch, num_heads=12, size_per_head=64, num_ids=32,
               has_ids=has_ids, **(streams if streams_and_dropout else {}))
  if branch == "long":
    b = local_radius + 1
    return reference.BranchCase.long_branch(num_blocks=-(-long_len // b),
                                            block_len=b, global_len=global_len,
                                            **sizes)
  return reference.BranchCase.global_branch(
      global_len=global_len, long_len=long_len, **sizes)


TIMED = {"fwd": "branch_forward", "bwd": "branch_backward",
         "fwd_bwd": "branch_forward_backward"}


def time_side(reference, device, repeats: int, warmup: int, branch: str,
              streams_and_dropout: bool, batch: int = 4,
              long_len: int = 4096, local_radius: int = 84,
              global_len: int = 256, dtype_name: str = "bfloat16",
              has_ids: bool = True, low_streams: bool = False,
              passes: Tuple[str, ...] = ("fwd",), num_sources: int = 0
              ) -> List[Dict[str, Any]]:
  """The calls at the benchmark's shape, with their floor figures: per
  pass in `passes` (fwd: the forward alone; bwd: the backward alone, on
  the forward's outputs; fwd_bwd: both in one program, the floor figures
  summed), one record."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  case = benchmark_case(reference, branch, streams_and_dropout, batch,
                        long_len, local_radius, global_len, has_ids,
                        num_sources)
  dtype = jnp.dtype(dtype_name)
  stream_dtype = dtype if low_streams else jnp.dtype(np.float32)
  pieces = reference.branch_pieces(case, seed=3)
  args = [jax.device_put(x, device)
          for x in operands(case, pieces, dtype, stream_dtype)]
  del pieces
  forward = branch_call(reference, case, dtype, stream_dtype)
  calls = {"fwd": lambda: forward(*args)}
  traffic = {"fwd": side_traffic(case, dtype.itemsize,
                                 stream_dtype.itemsize)}
  if set(passes) - {"fwd"}:
    grads_in = [jax.device_put(x, device)
                for x in incoming(case, dtype, stream_dtype, seed=5)]
    ctx, lse = forward(*args)[:2]
    backward = backward_call(reference, case, dtype, stream_dtype)
    training = training_call(reference, case, dtype, stream_dtype)
    calls["bwd"] = lambda: backward(*args, ctx, lse, *grads_in)
    calls["fwd_bwd"] = lambda: training(*args, *grads_in)
    traffic["bwd"] = branch_backward_traffic(case, dtype.itemsize,
                                             stream_dtype.itemsize)
    traffic["fwd_bwd"] = {k: traffic["fwd"][k] + traffic["bwd"][k]
                          for k in ("bytes", "flops")}
  records = []
  for name in passes:
    timed = timing.time_calls(
        lambda fn=calls[name]: jax.block_until_ready(fn()), warmup, repeats)
    records.append(_timing_record(
        case, device, dtype_name, low_streams, branch, streams_and_dropout,
        dict(batch=batch, long_len=long_len, global_len=global_len),
        name, traffic[name], timed))
  return records


def _timing_record(case, device, dtype_name: str, low_streams: bool,
                   branch: str, streams_and_dropout: bool,
                   shape: Dict[str, int], pass_name: str,
                   traffic: Dict[str, float], timed: Dict[str, Any]
                   ) -> Dict[str, Any]:
  """A timing record (`tools/gpu/gpu_summary.py` reads its fields); shape:
  the benchmark's batch, long_len and global_len."""
  median = timed["median_s"]
  cubins = []
  if pass_name != "bwd":
    cubins.append(variant(case, dtype_name, low_streams))
  if pass_name != "fwd":
    cubins += backward_variants(case, dtype_name, low_streams)
  return {"record_type": "kernel_timing",
          "kernel": _label(case, TIMED[pass_name]), "pass": pass_name,
          "dtype": dtype_name, "has_ids": case.has_ids, "branch": branch,
          "streams": streams_and_dropout, "num_sources": case.num_sources,
          "dropout_rate": case.dropout_rate,
          "variant": cubins[0], "variants": cubins,
          "device": str(device), **shape,
          "padded_len": case.rows if case.band else shape["long_len"],
          "block_len": case.block_len if case.band else 1,
          "num_rows": case.rows, "num_heads": case.num_heads,
          "size_per_head": case.size_per_head, **timed,
          "floor_bytes": traffic["bytes"], "flops": traffic["flops"],
          "achieved_gb_per_s": traffic["bytes"] / median / 1e9,
          "achieved_tflop_per_s": traffic["flops"] / median / 1e12}


def _cubin_manifest(library: str) -> Dict[str, Any]:
  """The build's tiles and Triton version (the handler's cubin folder:
  ETC_KERNELS_CUBIN_DIR, else cubins/ beside the library)."""
  folder = os.environ.get("ETC_KERNELS_CUBIN_DIR") or os.path.join(
      os.path.dirname(os.path.abspath(library)), "cubins")
  path = os.path.join(folder, "manifest.json")
  if not os.path.exists(path):
    return {"folder": folder}
  with open(path) as f:
    manifest = json.load(f)
  return {"folder": folder, "tiles": manifest.get("tiles"),
          "triton": manifest.get("triton"),
          "kernels": manifest.get("kernels")}


def _launched(record: Dict[str, Any], folder: str) -> Dict[str, Any]:
  """The record with the cubins the handlers launched from `folder`: an
  aligned one where the build holds it, else the plain one."""
  if "variant" in record:
    record["variant"] = kernel_variants.launched_name(record["variant"], folder)
  if "variants" in record:
    record["variants"] = [kernel_variants.launched_name(v, folder)
                          for v in record["variants"]]
  return record


def _timed_sides() -> List[Tuple[str, bool, int]]:
  """(branch, streams and dropout, sources): summed streams, streams
  recomputed from the 11 layers before the twelfth, neither."""
  return [(branch, on, sources) for branch in ("long", "global")
          for on, sources in ((True, 0), (True, 11), (False, 0))]


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--library", required=True,
                      help="libetc_attention_ffi.so "
                      "(tools/kernels/build_kernels.py)")
  parser.add_argument("--device", default=None,
                      help="jax platform: cpu or gpu (default: jax's)")
  parser.add_argument("--repeats", type=int, default=20)
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--no_timing", action="store_true")
  parser.add_argument("--no_check", action="store_true",
                      help="time only (e.g. a sweep of tile shapes: one "
                      "build per ETC_KERNELS_CUBIN_DIR)")
  parser.add_argument("--low_streams", action="store_true",
                      help="running sums in the inputs' dtype (a build "
                      "with --stream_dtypes=low), not float32")
  parser.add_argument("--dtypes", default=",".join(TOLERANCE),
                      help="comma list of the checked input dtypes (a "
                      "build of fewer dtypes carries fewer cubins)")
  parser.add_argument("--passes", default=",".join(PASSES),
                      help="comma list of the checked and timed passes: "
                      "fwd (etc_branch_forward), bwd (etc_branch_backward: "
                      "also timed with the forward, as in training)")
  parser.add_argument("--output_jsonl", default=None)
  args = parser.parse_args(argv)
  dtypes = [d for d in args.dtypes.split(",") if d]
  if not dtypes or set(dtypes) - set(TOLERANCE):
    print(f"error: --dtypes {args.dtypes}: a list of {list(TOLERANCE)}",
          file=sys.stderr)
    return 2
  passes = [p for p in args.passes.split(",") if p]
  if not passes or set(passes) - set(PASSES):
    print(f"error: --passes {args.passes}: a list of {list(PASSES)}",
          file=sys.stderr)
    return 2
  if not os.path.exists(args.library):
    print(f"error: --library {args.library}: no such file", file=sys.stderr)
    return 2
  import jax  # pylint: disable=g-import-not-at-top
  xla_runner.register_ffi_library(args.library, args.device)
  folder = _cubin_manifest(args.library)["folder"]
  device = jax.devices(args.device)[0] if args.device else jax.devices()[0]
  ok = True
  checks = ([check] if "fwd" in passes else []) + (
      [check_backward] if "bwd" in passes else [])
  # A call that fails (a cubin not built, a launch refused) is recorded
  # with its message, and the next one runs: one missing variant must not
  # cost a device run the rest of its records.
  for dtype in ([] if args.no_check else dtypes):
    for case in check_cases(reference):
      for check_pass in checks:
        start = time.perf_counter()
        try:
          record = check_pass(reference, device, dtype, case,
                              args.low_streams)
        except Exception as e:  # pylint: disable=broad-except
          kernel = ("branch_forward" if check_pass is check
                    else "branch_backward")
          record = {"record_type": "kernel_check",
                    "kernel": _label(case, kernel), "dtype": dtype,
                    "has_ids": case.has_ids, "ok": False,
                    "error": f"{type(e).__name__}: {e}"[:500]}
        record["wall_s"] = time.perf_counter() - start
        timing.emit(_launched(record, folder), args.output_jsonl)
        ok &= record["ok"]
  timed = tuple(passes) + (("fwd_bwd",) if "bwd" in passes else ())
  for branch, on, sources in ([] if args.no_timing else _timed_sides()):
    try:
      records = time_side(reference, device, args.repeats, args.warmup,
                          branch, on, low_streams=args.low_streams,
                          passes=timed, num_sources=sources)
    except Exception as e:  # pylint: disable=broad-except
      ok = False
      records = [{"record_type": "kernel_timing", "branch": branch,
                  "streams_and_dropout": on, "num_sources": sources,
                  "error": f"{type(e).__name__}: {e}"[:500]}]
    for record in records:
      record["cubins"] = _cubin_manifest(args.library)
      timing.emit(_launched(record, folder), args.output_jsonl)
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
