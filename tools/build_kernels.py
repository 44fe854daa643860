r"""Builds the fused attention kernels: the FFI library and the CUDA cubins.

    python -m tools.build_kernels --output_dir=build/kernels \
        [--arch=90] [--head_sizes=64] [--ffi_include=DIR] [--no_cubins]

writes

    DIR/libetc_attention_ffi.so     the XLA FFI handlers (host and CUDA)
    DIR/cubins/<variant>.cubin      Triton's ahead-of-time compiled kernels
    DIR/cubins/<variant>.meta       "<function> <shared bytes> <warps> <BM>"
    DIR/cubins/manifest.json        the variants, the target and Triton's version

One variant per kernel, input dtype (float32, bfloat16, float16), head size
and relative term (with or without ids): the names the CUDA handlers look
up (`etc_realformer/kernels/cc/attention_ffi.cc`). Triton compiles for a
GPU target without a GPU (`triton.compile(ASTSource(...),
target=GPUTarget("cuda", arch, 32))`), so this runs on any machine with
Triton; the library needs a C++17 compiler and the XLA FFI headers
(TensorFlow's `include` folder, else jax's `jax.ffi.include_dir()`).

Neither TensorFlow nor the package is imported: Triton cannot load into a
process that has loaded TensorFlow (their LLVM options collide), and the
GPU machine has no TensorFlow. The kernel and library modules are loaded by
path.
"""

import argparse
import importlib.util
import json
import os
import pathlib
import sys
from typing import Dict, List, Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNELS_DIR = ROOT / "etc_realformer" / "kernels"
DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

# The long side's forward kernel: its arguments in order (pointers with
# their element type; `None`: the input dtype), its int arguments, and
# its constexprs.
LONG_SIDE_POINTERS = (
    ("q", None), ("k_band", None), ("v_band", None), ("k_global", None),
    ("v_global", None), ("per_id", "fp32"), ("codes_band", "i8"),
    ("codes_global", "i8"), ("valid", "fp32"), ("ctx", None), ("lse", "fp32"))
LONG_SIDE_INTS = ("num_heads", "padded_len", "global_len", "num_ids",
                  "block_len", "band_stride")


def _load(name: str, path: pathlib.Path):
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def variant_name(kernel: str, dtype: str, head_size: int,
                 ids_padded: int) -> str:
  """The cubin's name, as the CUDA handler builds it (ids_padded: the
  relative vocabulary rounded up to a power of two; 0: no relative term)."""
  return (f"{kernel}_{dtype}_d{head_size}_"
          f"{f'r{ids_padded}' if ids_padded else 'noids'}")


def compile_long_side(triton_attention, dtype: str, head_size: int,
                      ids_padded: int, arch: int, tiles: Dict[str, int]):
  """Triton's compiled kernel (`.asm["cubin"]`, `.metadata`)."""
  import triton  # pylint: disable=g-import-not-at-top
  from triton.backends.compiler import GPUTarget  # pylint: disable=g-import-not-at-top
  from triton.compiler import ASTSource  # pylint: disable=g-import-not-at-top
  fn = triton_attention.long_side_forward
  if not isinstance(fn, triton.runtime.JITFunction):  # interpreted
    fn = triton.runtime.JITFunction(fn.fn)
  signature: Dict[str, str] = {}
  for name, element in LONG_SIDE_POINTERS:
    signature[name] = "*" + (element or DTYPES[dtype])
  for name in LONG_SIDE_INTS:
    signature[name] = "i32"
  constexprs = {"D": head_size, "BM": tiles["block_m"],
                "BN": tiles["block_n"], "R": max(ids_padded, 1),
                "HAS_IDS": bool(ids_padded), "IEEE": dtype == "float32",
                "PICK_IN_REGISTERS": bool(tiles["pick_in_registers"])}
  for name in constexprs:
    signature[name] = "constexpr"
  # XLA's buffers are aligned (64 bytes and more): 16-byte vector loads.
  attrs = {(i,): [["tt.divisibility", 16]]
           for i in range(len(LONG_SIDE_POINTERS))}
  # The band codes' rows are padded to 16 bytes (vector loads).
  attrs[(len(LONG_SIDE_POINTERS) + LONG_SIDE_INTS.index("band_stride"),)] = [
      ["tt.divisibility", 16]]
  source = ASTSource(fn=fn, signature=signature, constexprs=constexprs,
                     attrs=attrs)
  return triton.compile(
      source, target=GPUTarget("cuda", arch, 32),
      options={"num_warps": tiles["num_warps"],
               "num_stages": tiles["num_stages"]})


def write_cubins(output_dir: str, head_sizes: List[int], ids_padded: List[int],
                 arch: int, dtypes: List[str], tiles: Dict[str, int]
                 ) -> List[Dict[str, object]]:
  """Compiles every variant into `output_dir/cubins`; returns the manifest's
  entries."""
  import triton  # pylint: disable=g-import-not-at-top
  triton_attention = _load("triton_attention",
                           KERNELS_DIR / "triton_attention.py")
  folder = os.path.join(output_dir, "cubins")
  os.makedirs(folder, exist_ok=True)
  entries = []
  for dtype in dtypes:
    for head_size in head_sizes:
      for ids in list(ids_padded) + [0]:
        compiled = compile_long_side(triton_attention, dtype, head_size,
                                     ids, arch, tiles)
        meta = compiled.metadata
        name = variant_name("long_side_forward", dtype, head_size, ids)
        for field in ("global_scratch_size", "profile_scratch_size"):
          if getattr(meta, field, 0):
            raise RuntimeError(f"{name}: Triton asks for {field} "
                               f"{getattr(meta, field)}; the handlers pass "
                               f"none")
        with open(os.path.join(folder, name + ".cubin"), "wb") as f:
          f.write(compiled.asm["cubin"])
        with open(os.path.join(folder, name + ".meta"), "w") as f:
          f.write(f"{meta.name} {meta.shared} {meta.num_warps} "
                  f"{tiles['block_m']}\n")
        entries.append({"variant": name, "function": meta.name,
                        "shared": meta.shared, "num_warps": meta.num_warps,
                        "registers": getattr(meta, "n_regs", None),
                        "spills": getattr(meta, "n_spills", None)})
  with open(os.path.join(folder, "manifest.json"), "w") as f:
    json.dump({"arch": arch, "triton": triton.__version__, "tiles": tiles,
               "kernels": entries}, f, indent=1)
  return entries


def default_ffi_include() -> Optional[str]:
  """TensorFlow's include folder (found without importing TensorFlow), else
  jax's FFI include folder."""
  spec = importlib.util.find_spec("tensorflow")
  if spec is not None and spec.submodule_search_locations:
    include = os.path.join(list(spec.submodule_search_locations)[0],
                           "include")
    if os.path.exists(os.path.join(include, "xla", "ffi", "api", "ffi.h")):
      return include
  try:
    import jax.ffi  # pylint: disable=g-import-not-at-top
    return jax.ffi.include_dir()
  except ImportError:
    return None


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--arch", type=int, default=90,
                      help="CUDA compute capability x 10 (80: A100, 90: H100)")
  parser.add_argument("--head_sizes", default="64",
                      help="comma list of size_per_head values")
  parser.add_argument("--relative_vocab_sizes", default="32",
                      help="comma list of relative vocabularies (each "
                      "rounded up to a power of two); a variant without "
                      "relative ids is always built")
  parser.add_argument("--dtypes", default=",".join(DTYPES),
                      help="comma list of input dtypes")
  parser.add_argument("--block_m", type=int, default=None,
                      help="query rows per tile (default: the kernel's)")
  parser.add_argument("--block_n", type=int, default=None,
                      help="keys per tile (default: the kernel's)")
  parser.add_argument("--num_warps", type=int, default=None)
  parser.add_argument("--num_stages", type=int, default=None)
  parser.add_argument("--pick", choices=("default", "memory", "registers"),
                      default="default",
                      help="how the relative scores are picked per key")
  parser.add_argument("--ffi_include", default=None,
                      help="folder holding xla/ffi/api/ffi.h")
  parser.add_argument("--no_cubins", action="store_true",
                      help="build the library only")
  parser.add_argument("--no_library", action="store_true",
                      help="compile the cubins only")
  args = parser.parse_args(argv)
  if not args.no_library:
    include = args.ffi_include or default_ffi_include()
    if include is None:
      print("build_kernels: no XLA FFI headers found (install tensorflow or "
            "jax, or pass --ffi_include)", file=sys.stderr)
      return 2
    ffi_library = _load("ffi_library", KERNELS_DIR / "ffi_library.py")
    try:
      path = ffi_library.build_library(args.output_dir, include)
    except ffi_library.KernelBuildError as e:
      print(f"build_kernels: {e}", file=sys.stderr)
      return 2
    print(f"library: {path}")
  if not args.no_cubins:
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    triton_attention = _load("triton_attention",
                             KERNELS_DIR / "triton_attention.py")
    tiles = {"block_m": args.block_m or triton_attention.BLOCK_M,
             "block_n": args.block_n or triton_attention.BLOCK_N,
             "num_warps": args.num_warps or triton_attention.NUM_WARPS,
             "num_stages": args.num_stages or triton_attention.NUM_STAGES,
             "pick_in_registers": int(
                 triton_attention.PICK_IN_REGISTERS if args.pick == "default"
                 else args.pick == "registers")}
    head_sizes = [int(v) for v in args.head_sizes.split(",") if v]
    ids_padded = sorted({1 << max(int(v) - 1, 0).bit_length()
                         for v in args.relative_vocab_sizes.split(",") if v})
    dtypes = [d for d in args.dtypes.split(",") if d]
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
      print(f"build_kernels: --dtypes {bad}: not one of {list(DTYPES)}",
            file=sys.stderr)
      return 2
    for entry in write_cubins(args.output_dir, head_sizes, ids_padded,
                              args.arch, dtypes, tiles):
      print(f"cubin: {entry['variant']} shared={entry['shared']} "
            f"registers={entry['registers']} spills={entry['spills']}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
