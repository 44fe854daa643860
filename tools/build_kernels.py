r"""Builds the fused attention kernels: the FFI library and the CUDA cubins.

    python -m tools.build_kernels --output_dir=build/kernels \
        [--arch=90] [--head_sizes=64] [--relative_vocab_sizes=32,0] \
        [--dtypes=float32,bfloat16,float16] [--sides=band,dense] \
        [--streams=0000,0011,1111,1100] [--stream_dtypes=f32] \
        [--dropout=off,rows] [--passes=fwd,bwd] [--line_info] \
        [--ffi_include=DIR] [--no_cubins] [--aligned_for=L:G:r[,...]] \
        [--modules=DIR[,DIR...]]

writes

    DIR/libetc_attention_ffi.so     the XLA FFI handlers (host and CUDA)
    DIR/cubins/<variant>.cubin      Triton's ahead-of-time compiled kernels
    DIR/cubins/<variant>.meta       "<function> <shared bytes> <warps> <tile>"
    DIR/cubins/manifest.json        the variants, the target and Triton's version

One cubin of each side kernel (`triton_attention`: the forward pass
`side_forward`; the backward pass `side_backward_queries` and, per pattern,
`side_backward_keys`) per input dtype, head size, relative term (with or
without ids), first pattern (band or dense), stream flags and dtype, and
dropout: the names the CUDA handlers look up (`kernel_names.variant_name`,
`etc_realformer/kernels/cc/attention_ffi.cc`). The metadata's tile is the
one along the launch grid's first axis (query rows, BM; keys for the keys
kernel, BN). By default what a 12-layer model trains and runs with, with
the benchmark's relative vocabulary and without ids: both passes, both
sides, the streams of its first, middle and last layers, recomputed
streams and none (float32 sums), dropout on (rows first) and off
(`--passes=fwd`: inference only): for one dtype 160 cubins, 6.5 MiB
(without source lines: `--line_info` keeps them, at some 3x the size).
`--aligned_for` adds each of them aligned for a shape: its lengths that
are multiples of 16 declared so (`kernel_names.aligned_digits`), which
Triton's loads and stores they stride then vectorize; a handler launches
a call's aligned cubin where the build has it, else the plain one.
`--modules` adds every cubin that exported modules launch, aligned for
their calls' lengths (`tools.kernel_variants` reads their custom calls),
so that a GPU run never meets a call whose cubin was not built.
The backward's queries
kernel unrolls its per-id sums over R, the longest compiles (R = 32: some
20 s each), which the build starts first.

Triton compiles for a GPU target without a GPU (`triton.compile(
ASTSource(...), target=GPUTarget("cuda", arch, 32))`), so this runs on any
machine with Triton, in `--jobs` processes; the library needs a C++17
compiler and the XLA FFI headers (TensorFlow's `include` folder, else
jax's `jax.ffi.include_dir()`).

Neither TensorFlow nor the package is imported: Triton cannot load into a
process that has loaded TensorFlow (their LLVM options collide), and the
GPU machine has no TensorFlow. The kernel and library modules are loaded by
path.
"""

import argparse
import concurrent.futures
import dataclasses
import importlib.util
import json
import multiprocessing
import os
import pathlib
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tools import kernel_grids
# The variants and their names (re-exported: callers name them from here).
from tools.kernel_names import DEFAULT_STREAMS
from tools.kernel_names import DROPOUT_LAYOUTS
from tools.kernel_names import DTYPES
from tools.kernel_names import FORWARD
from tools.kernel_names import KEYS
from tools.kernel_names import PASSES
from tools.kernel_names import QUERIES
from tools.kernel_names import SIDES
from tools.kernel_names import STREAM_FLAGS
from tools.kernel_names import Variant
from tools.kernel_names import aligned_variants
from tools.kernel_names import default_variants
from tools.kernel_names import padded_ids
from tools.kernel_names import variant_name

ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNELS_DIR = ROOT / "etc_realformer" / "kernels"

# The side kernels' arguments in order (`triton_attention`): pointers with
# their element type ("T": the inputs' dtype, "S": the running sums'),
# ints, floats; then the constexprs, not passed at launch.
SIDE_POINTERS = (
    ("q", "T"), ("k1", "T"), ("v1", "T"), ("k2", "T"), ("v2", "T"),
    ("per_id", "fp32"), ("codes1", "i8"), ("codes2", "i8"),
    ("valid", "fp32"), ("prev1", "S"), ("prev2", "S"), ("src_q", "T"),
    ("src_k1", "T"), ("src_k2", "T"), ("seeds", "i32"), ("ctx", "T"),
    ("lse", "fp32"), ("new1", "S"), ("new2", "S"))
SIDE_INTS = ("batch_size", "num_heads", "num_rows", "first_len",
             "second_len", "num_ids", "block_len", "codes1_stride",
             "num_sources", "keep_threshold")
SIDE_FLOATS = ("gain", "scale1", "scale2")
SIDE_CONSTEXPRS = ("D", "BM", "BN", "R", "BAND", "HAS_IDS", "READ1", "READ2",
                   "WRITE1", "WRITE2", "SOURCES", "DROPOUT", "BY_ROWS",
                   "IEEE")
QUERIES_POINTERS = SIDE_POINTERS[:17] + (
    ("dctx", "T"), ("dnew1", "S"), ("dnew2", "S"), ("dq", "T"),
    ("dper_id", "fp32"), ("dprev1", "S"), ("dprev2", "S"), ("delta", "fp32"))
KEYS_POINTERS = (
    ("q", "T"), ("k", "T"), ("v", "T"), ("per_id", "fp32"), ("codes", "i8"),
    ("valid", "fp32"), ("prev", "S"), ("src_q", "T"), ("src_k", "T"),
    ("seeds", "i32"), ("lse", "fp32"), ("delta", "fp32"), ("dctx", "T"),
    ("dnew", "S"), ("dk", "T"), ("dv", "T"))
KEYS_INTS = ("batch_size", "num_heads", "num_rows", "key_rows", "num_ids",
             "block_len", "codes_stride", "num_sources", "keep_threshold")
KEYS_CONSTEXPRS = ("D", "BM", "BN", "R", "BAND", "HAS_IDS", "READ", "WRITE",
                   "SOURCES", "DROPOUT", "BY_ROWS", "IEEE", "PATTERN",
                   "BAND_SIDE")


@dataclasses.dataclass(frozen=True)
class Signature:
  """A kernel's launch arguments (pointers, ints, floats), its constexprs,
  and the int that strides the band's codes (16-byte rows)."""
  pointers: Tuple[Tuple[str, str], ...]
  ints: Tuple[str, ...]
  floats: Tuple[str, ...]
  constexprs: Tuple[str, ...]
  codes_stride: str

  @property
  def arg_names(self) -> List[str]:
    return ([n for n, _ in self.pointers] + list(self.ints) +
            list(self.floats) + list(self.constexprs))


SIGNATURES = {
    FORWARD: Signature(SIDE_POINTERS, SIDE_INTS, SIDE_FLOATS,
                       SIDE_CONSTEXPRS, "codes1_stride"),
    QUERIES: Signature(QUERIES_POINTERS, SIDE_INTS, SIDE_FLOATS,
                       SIDE_CONSTEXPRS, "codes1_stride"),
    KEYS: Signature(KEYS_POINTERS, KEYS_INTS, ("gain", "scale"),
                    KEYS_CONSTEXPRS, "codes_stride"),
}

def _load(name: str, path: pathlib.Path):
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def constexprs(variant: Variant, tiles: Dict[str, int]) -> Dict[str, Any]:
  """The kernel's constexprs for one variant."""
  common = {"D": variant.head_size, "SOURCES": variant.sources,
            "BM": tiles["block_m"],
            "BN": tiles["block_n"], "R": max(variant.ids_padded, 1),
            "HAS_IDS": bool(variant.ids_padded), "DROPOUT": variant.dropout,
            "BY_ROWS": variant.by_rows or not variant.dropout,
            "IEEE": variant.dtype == "float32"}
  if variant.kernel == KEYS:
    read, write = variant.flags
    # BAND: this pattern is the band (the band side's first).
    values = dict(common, BAND=variant.band and variant.pattern == 1,
                  READ=read, WRITE=write, PATTERN=variant.pattern - 1,
                  BAND_SIDE=variant.band)
  else:
    read1, read2, write1, write2 = variant.flags
    values = dict(common, BAND=variant.band, READ1=read1, READ2=read2,
                  WRITE1=write1, WRITE2=write2)
  return {name: values[name]
          for name in SIGNATURES[variant.kernel].constexprs}


def divisible_ints(variant: Variant) -> List[str]:
  """The int arguments the variant's cubin takes as multiples of 16: the
  band codes' row stride (its rows are padded to 16 bytes), and an aligned
  variant's lengths (`Variant.aligned`) with the codes' row stride that
  equals a dense pattern's key rows (`attention_ffi.cc`: codes1 [B, N, K1]
  on the dense side, codes2 [B, N, K2])."""
  kernel = SIGNATURES[variant.kernel]
  band_codes = variant.band and variant.pattern in (0, 1)
  names = [kernel.codes_stride] if band_codes else []
  for name in variant.aligned_lengths:
    names.append(name)
    if variant.kernel == KEYS:
      if name == "key_rows" and not band_codes:
        names.append(kernel.codes_stride)
    elif name == "first_len" and not variant.band:
      names.append(kernel.codes_stride)
  return names


def kernel_source(triton_attention, variant: Variant, tiles: Dict[str, int]):
  """Triton's `ASTSource` of one variant of its kernel."""
  import triton  # pylint: disable=g-import-not-at-top
  from triton.compiler import ASTSource  # pylint: disable=g-import-not-at-top
  fn = getattr(triton_attention, variant.kernel)
  if not isinstance(fn, triton.runtime.JITFunction):  # interpreted
    fn = triton.runtime.JITFunction(fn.fn)
  kernel = SIGNATURES[variant.kernel]
  if list(fn.arg_names) != kernel.arg_names:
    raise RuntimeError(f"{variant.kernel} takes {fn.arg_names}; the "
                       f"handlers launch {kernel.arg_names}")
  element = {"T": DTYPES[variant.dtype], "S": variant.stream_type}
  signature: Dict[str, str] = {}
  for name, kind in kernel.pointers:
    signature[name] = "*" + element.get(kind, kind)
  for name in kernel.ints:
    signature[name] = "i32"
  for name in kernel.floats:
    signature[name] = "fp32"
  values = constexprs(variant, tiles)
  for name in values:
    signature[name] = "constexpr"
  # XLA's buffers are aligned (64 bytes and more): 16-byte vector loads.
  attrs = {(i,): [["tt.divisibility", 16]]
           for i in range(len(kernel.pointers))}
  for name in divisible_ints(variant):
    attrs[(len(kernel.pointers) + kernel.ints.index(name),)] = [
        ["tt.divisibility", 16]]
  return ASTSource(fn=fn, signature=signature, constexprs=values,
                   attrs=attrs)


_kernels_module = None


def compile_variant(variant: Variant, arch: int, tiles: Dict[str, int]
                    ) -> Dict[str, object]:
  """Compiles one variant: its cubin and metadata (picklable: the build's
  worker processes return it)."""
  global _kernels_module
  import triton  # pylint: disable=g-import-not-at-top
  from triton.backends.compiler import GPUTarget  # pylint: disable=g-import-not-at-top
  if _kernels_module is None:
    _kernels_module = _load("triton_attention",
                            KERNELS_DIR / "triton_attention.py")
  compiled = triton.compile(
      kernel_source(_kernels_module, variant, tiles),
      target=GPUTarget("cuda", arch, 32),
      options={"num_warps": tiles["num_warps"],
               "num_stages": tiles["num_stages"],
               # A cap on registers a thread (None: ptxas decides): more
               # programs a multiprocessor, at the price of spills.
               "maxnreg": tiles.get("maxnreg")})
  meta = compiled.metadata
  for field in ("global_scratch_size", "profile_scratch_size"):
    if getattr(meta, field, 0):
      raise RuntimeError(f"{variant.name}: Triton asks for {field} "
                         f"{getattr(meta, field)}; the handlers pass none")
  return {"variant": variant.name, "cubin": compiled.asm["cubin"],
          "function": meta.name, "shared": meta.shared,
          "num_warps": meta.num_warps,
          "registers": getattr(meta, "n_regs", None),
          "spills": getattr(meta, "n_spills", None)}


def write_cubins(output_dir: str, variants: Sequence[Variant], arch: int,
                 tiles: Dict[str, Dict[str, int]], jobs: int = 1
                 ) -> List[Dict[str, object]]:
  """Compiles every variant into `output_dir/cubins` (`jobs` processes)
  with its kernel's tiles (`tiles[kernel]`: block_m, block_n, num_warps,
  num_stages); returns the manifest's entries."""
  import triton  # pylint: disable=g-import-not-at-top
  folder = os.path.join(output_dir, "cubins")
  os.makedirs(folder, exist_ok=True)
  # The slowest first: the last workers to finish then hold short ones.
  order = sorted(variants, key=lambda v: -v.cost)
  if jobs > 1 and len(variants) > 1:
    # Fresh interpreters: Triton's compiler holds no state worth forking.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(
        min(jobs, len(variants)), mp_context=context) as pool:
      results = list(pool.map(compile_variant, order,
                              [arch] * len(order),
                              [tiles[v.kernel] for v in order]))
  else:
    results = [compile_variant(v, arch, tiles[v.kernel]) for v in order]
  by_name = {v.name: r for v, r in zip(order, results)}
  entries = []
  for variant in variants:
    name = variant.name
    result = by_name[name]
    with open(os.path.join(folder, name + ".cubin"), "wb") as f:
      f.write(result.pop("cubin"))
    tile = tiles[variant.kernel][variant.tile]
    with open(os.path.join(folder, name + ".meta"), "w") as f:
      f.write(f"{result['function']} {result['shared']} "
              f"{result['num_warps']} {tile}\n")
    entries.append({**result, **dataclasses.asdict(variant)})
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


def modules_variants(paths: Sequence[str]) -> List[Variant]:
  """The variants that the exported modules under `paths` launch
  (`tools.kernel_variants`), read in a child process: jaxlib reads the
  modules, and this process loads Triton."""
  result = subprocess.run(
      [sys.executable, "-m", "tools.kernel_variants", "--json",
       "--modules=" + ",".join(os.path.abspath(p) for p in paths)],
      cwd=ROOT, capture_output=True, text=True, check=False)
  if result.returncode != 0:
    raise ValueError(result.stderr.strip().splitlines()[-1]
                     if result.stderr.strip() else "kernel_variants failed")
  return [Variant(**fields) for fields in json.loads(result.stdout)]


def _list(text: str) -> List[str]:
  return [v for v in text.split(",") if v]


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--arch", type=int, default=90,
                      help="CUDA compute capability x 10 (80: A100, 90: H100)")
  parser.add_argument("--head_sizes", default="64",
                      help="comma list of size_per_head values")
  parser.add_argument("--relative_vocab_sizes", default="32,0",
                      help="comma list of relative vocabularies (each "
                      "rounded up to a power of two); 0: the variants "
                      "without relative ids")
  parser.add_argument("--dtypes", default=",".join(DTYPES),
                      help="comma list of input dtypes")
  parser.add_argument("--sides", default=",".join(SIDES),
                      help="comma list of first patterns: band (the sparse "
                      "long side), dense (the global side, the full path's "
                      "long side)")
  parser.add_argument("--streams", default=",".join(DEFAULT_STREAMS),
                      help="comma list of stream flags READ1 READ2 WRITE1 "
                      "WRITE2 as 0/1 digits, READ digits \"s\" for sums made "
                      "from the sources (default: a 12-layer model's)")
  parser.add_argument("--stream_dtypes", default="f32",
                      help="comma list of the running sums' dtypes: f32, "
                      "low (the inputs' dtype)")
  parser.add_argument("--dropout", default="off,rows",
                      help="comma list of dropout variants: off, rows (the "
                      "index rows first), whole (row-major)")
  parser.add_argument("--passes", default=",".join(PASSES),
                      help="comma list of passes: fwd (side_forward), bwd "
                      "(side_backward_queries, side_backward_keys)")
  parser.add_argument("--block_m", type=int, default=None,
                      help="query rows per tile (default: the kernel's)")
  parser.add_argument("--block_n", type=int, default=None,
                      help="keys per tile (default: the kernel's)")
  parser.add_argument("--num_warps", type=int, default=None)
  parser.add_argument("--num_stages", type=int, default=None)
  parser.add_argument("--maxnreg", type=int, default=None,
                      help="at most this many registers a thread (a "
                      "multiple of 8 up to 255; default: ptxas decides)")
  parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                      help="compiler processes")
  parser.add_argument("--line_info", action="store_true",
                      help="keep the kernels' source lines in the cubins "
                      "(a profiler's source view; some 3x the size)")
  parser.add_argument("--ffi_include", default=None,
                      help="folder holding xla/ffi/api/ffi.h")
  parser.add_argument("--no_cubins", action="store_true",
                      help="build the library only")
  parser.add_argument("--no_library", action="store_true",
                      help="compile the cubins only")
  parser.add_argument("--aligned_for", default="",
                      help="comma list of shapes L:G:r (long length, "
                      "global length, local radius): also each variant "
                      "with the lengths of the shape that are multiples "
                      "of 16 declared so (faster loads; a handler takes "
                      "them for calls of those lengths)")
  parser.add_argument("--modules", default="",
                      help="comma list of exported modules (or folders with "
                      "modules under them): also every cubin their calls "
                      "launch")
  args = parser.parse_args(argv)
  dtypes, sides = _list(args.dtypes), _list(args.sides)
  streams, stream_dtypes = _list(args.streams), _list(args.stream_dtypes)
  dropout, passes = _list(args.dropout), _list(args.passes)
  for flag, values, allowed in (
      ("dtypes", dtypes, DTYPES), ("sides", sides, SIDES),
      ("passes", passes, PASSES),
      ("stream_dtypes", stream_dtypes, ("f32", "low")),
      ("dropout", dropout, DROPOUT_LAYOUTS),
      ("streams", streams, STREAM_FLAGS)):
    bad = [v for v in values if v not in allowed]
    if bad or not values:
      print(f"build_kernels: --{flag} {bad}: not one of {list(allowed)}",
            file=sys.stderr)
      return 2
  shapes = []
  for shape in _list(args.aligned_for):
    fields = shape.split(":")
    if len(fields) != 3 or not all(f.isdigit() and int(f) > 0
                                   for f in fields):
      print(f"build_kernels: --aligned_for {shape!r}: not L:G:r, three "
            f"positive integers", file=sys.stderr)
      return 2
    shapes += kernel_grids.side_lengths(*map(int, fields))
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
    if not args.line_info:
      # Source lines triple a cubin's size; the GPU runs carry the build.
      os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    triton_attention = _load("triton_attention",
                             KERNELS_DIR / "triton_attention.py")
    overrides = {name: value for name, value in (
        ("block_m", args.block_m), ("block_n", args.block_n),
        ("num_warps", args.num_warps), ("num_stages", args.num_stages),
        ("maxnreg", args.maxnreg)) if value}
    tiles = {kernel: dict(shape, **overrides)
             for kernel, shape in triton_attention.TILES.items()}
    head_sizes = [int(v) for v in _list(args.head_sizes)]
    ids_padded = sorted({padded_ids(int(v))
                         for v in _list(args.relative_vocab_sizes)},
                        reverse=True)
    variants = default_variants(dtypes, head_sizes, ids_padded, sides,
                                streams, stream_dtypes, dropout, passes)
    variants += aligned_variants(variants, shapes)
    if args.modules:
      try:
        launched = modules_variants(_list(args.modules))
      except ValueError as e:
        print(f"build_kernels: --modules: {e}", file=sys.stderr)
        return 2
      names = {v.name for v in variants}
      added = [v for v in launched if v.name not in names]
      print(f"modules: {len(launched)} cubins launched, {len(added)} beyond "
            f"the other flags'")
      variants += added
    start = time.perf_counter()
    for entry in write_cubins(args.output_dir, variants, args.arch, tiles,
                              args.jobs):
      print(f"cubin: {entry['variant']} shared={entry['shared']} "
            f"registers={entry['registers']} spills={entry['spills']}")
    size = sum(p.stat().st_size for p in pathlib.Path(
        args.output_dir, "cubins").glob("*.cubin"))
    print(f"{len(variants)} cubins in {time.perf_counter() - start:.0f} s "
          f"({size / 2**20:.1f} MiB in the folder)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
