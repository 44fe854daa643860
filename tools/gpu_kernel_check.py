r"""Checks and times the fused kernels' FFI handlers through jaxlib alone.

    python -m tools.gpu_kernel_check --library=DIR/libetc_attention_ffi.so \
        [--device=gpu] [--output_jsonl=FILE]

For each input dtype, the custom call `etc_long_side_forward` on random
pieces (`etc_realformer/kernels/reference.py`, several query tiles, hard
masks, fully masked rows) against the float64 NumPy reference: the
relative error of the context and of the row statistic, and whether any
value is not finite. Then the call alone at the benchmark's shape (12
heads, L = 4096, r = 84, G = 256, D = 64, batch 4, bfloat16): its time,
and the bytes it must move and the products it must compute over that time.
One JSON record per line (printed, and appended to `--output_jsonl`).

On the CPU (`--device=cpu`) it runs the host handlers: the same check on
any machine. Neither TensorFlow nor the package is imported (the GPU
machine has only jax): the reference module is loaded by path.
"""

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np

from tools import timing
from tools import xla_runner

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 3e-3}
INPUTS = ("q", "k_band", "v_band", "k_global", "v_global")
ORDER = ("q", "k_band", "v_band", "k_global", "v_global", "per_id",
         "codes_band", "codes_global", "valid")


def _reference_module():
  path = ROOT / "etc_realformer" / "kernels" / "reference.py"
  spec = importlib.util.spec_from_file_location("kernel_reference", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _long_side_call(case, dtype):
  """A jitted `etc_long_side_forward(*pieces) -> (ctx, lse)`."""
  import jax  # pylint: disable=g-import-not-at-top
  shape = (case.batch, case.num_heads, case.padded_len, case.size_per_head)
  call = jax.ffi.ffi_call(
      "etc_long_side_forward",
      (jax.ShapeDtypeStruct(shape, dtype),
       jax.ShapeDtypeStruct(shape[:3], np.float32)))
  return jax.jit(lambda *args: call(*args, block_len=np.int64(case.block_len),
                                    has_ids=bool(case.has_ids)))


def _device_pieces(pieces, dtype, device):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return [jax.device_put(jnp.asarray(pieces[n], dtype) if n in INPUTS
                         else pieces[n], device) for n in ORDER]


def check(reference, device, dtype_name: str, has_ids: bool
          ) -> Dict[str, Any]:
  """The custom call against the reference on one random problem."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  dtype = jnp.dtype(dtype_name)
  case = reference.LongSideCase(batch=2, num_heads=4, num_blocks=8,
                                block_len=85, global_len=256,
                                size_per_head=64, num_ids=32,
                                has_ids=has_ids)
  pieces = reference.long_side_pieces(case, seed=7)
  args = _device_pieces(pieces, dtype, device)
  # The reference reads the inputs as the kernel does (rounded).
  rounded = dict(pieces)
  for i, name in enumerate(ORDER):
    if name in INPUTS:
      rounded[name] = np.asarray(args[i], np.float32)
  ctx, lse = _long_side_call(case, dtype)(*args)
  ctx = np.asarray(ctx, np.float32)
  lse = np.asarray(lse)
  want_ctx, want_lse = reference.long_side_reference(rounded, case.block_len,
                                                     has_ids)
  ctx_error = reference.relative_error(ctx, want_ctx)
  # A query with no unmasked key (valid 0) gets zeros whatever its
  # statistic, which differs there (its masked scores carry no relative
  # term in the kernels): compared on valid rows.
  valid_rows = np.broadcast_to(pieces["valid"][:, None] > 0, lse.shape)
  lse_error = reference.relative_error(lse, want_lse, valid_rows)
  finite = bool(np.isfinite(ctx).all() and np.isfinite(lse).all())
  masked_zero = not ctx[0, :, -3:].any()
  return {"record_type": "kernel_check", "kernel": "long_side_forward",
          "dtype": dtype_name, "has_ids": has_ids, "device": str(device),
          "ctx_relative_error": ctx_error, "lse_relative_error": lse_error,
          "finite": finite, "masked_rows_zero": masked_zero,
          "ok": (finite and masked_zero and lse_error < 1e-5 and
                 ctx_error < TOLERANCE[dtype_name])}


def reference_band_stride(block_len: int) -> int:
  return _reference_module().band_stride(block_len)


def long_side_traffic(case, dtype_bytes: int) -> Dict[str, float]:
  """The fewest bytes the long side's forward moves (each input read once,
  each output written once) and its products' FLOPs (band and global keys
  of every query: q.k and p.v)."""
  b, lp, g, h = case.block_len, case.padded_len, case.global_len, \
      case.num_heads
  rows = case.batch * lp
  per_head = case.batch * h * case.size_per_head * dtype_bytes
  # per_id and valid in float32, one int8 code per band cell and global key.
  read = (per_head * (lp + 2 * (lp + 2 * b) + 2 * g) +
          4 * rows * (case.num_ids * h + 1) +
          rows * (reference_band_stride(b) + g))
  written = per_head * lp + 4 * case.batch * h * lp
  flops = 4 * case.batch * h * lp * (3 * b + g) * case.size_per_head
  return {"bytes": float(read + written), "flops": float(flops)}


def time_long_side(reference, device, repeats: int, warmup: int,
                   batch: int = 4, long_len: int = 4096,
                   local_radius: int = 84, global_len: int = 256,
                   dtype_name: str = "bfloat16", has_ids: bool = True
                   ) -> Dict[str, Any]:
  """The call alone at the benchmark's shape, with its floor figures."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  b = local_radius + 1
  case = reference.LongSideCase(batch=batch, num_heads=12,
                                num_blocks=-(-long_len // b), block_len=b,
                                global_len=global_len, size_per_head=64,
                                num_ids=32, has_ids=has_ids)
  pieces = reference.long_side_pieces(case, seed=3)
  args = _device_pieces(pieces, jnp.dtype(dtype_name), device)
  fn = _long_side_call(case, jnp.dtype(dtype_name))

  def call():
    fn(*args)[0].block_until_ready()

  timed = timing.time_calls(call, warmup, repeats)
  traffic = long_side_traffic(case, jnp.dtype(dtype_name).itemsize)
  median = timed["median_s"]
  return {"record_type": "kernel_timing", "kernel": "long_side_forward",
          "dtype": dtype_name, "has_ids": has_ids, "device": str(device),
          "batch": batch,
          "long_len": long_len, "padded_len": case.padded_len,
          "global_len": global_len, "block_len": b, "num_heads": 12,
          "size_per_head": 64, **timed, "floor_bytes": traffic["bytes"],
          "flops": traffic["flops"],
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


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--library", required=True,
                      help="libetc_attention_ffi.so (tools/build_kernels.py)")
  parser.add_argument("--device", default=None,
                      help="jax platform: cpu or gpu (default: jax's)")
  parser.add_argument("--repeats", type=int, default=20)
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--no_timing", action="store_true")
  parser.add_argument("--no_check", action="store_true",
                      help="time only (e.g. a sweep of tile shapes: one "
                      "build per ETC_KERNELS_CUBIN_DIR)")
  parser.add_argument("--output_jsonl", default=None)
  args = parser.parse_args(argv)
  if not os.path.exists(args.library):
    print(f"error: --library {args.library}: no such file", file=sys.stderr)
    return 2
  import jax  # pylint: disable=g-import-not-at-top
  xla_runner.register_ffi_library(args.library, args.device)
  device = jax.devices(args.device)[0] if args.device else jax.devices()[0]
  reference = _reference_module()
  ok = True
  for dtype in ([] if args.no_check else TOLERANCE):
    for has_ids in (True, False):
      start = time.perf_counter()
      record = check(reference, device, dtype, has_ids)
      record["wall_s"] = time.perf_counter() - start
      timing.emit(record, args.output_jsonl)
      ok &= record["ok"]
  for has_ids in ([] if args.no_timing else [True, False]):
    record = time_long_side(reference, device, args.repeats, args.warmup,
                            has_ids=has_ids)
    record["cubins"] = _cubin_manifest(args.library)
    timing.emit(record, args.output_jsonl)
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
