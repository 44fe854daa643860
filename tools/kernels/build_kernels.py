r"""Builds the fused attention kernels: the FFI library and the CUDA cubins.

    python -m tools.kernels.build_kernels --output_dir=build/kernels \
        [--arch=90] [--head_sizes=64] [--relative_vocab_sizes=32,0] \
        [--dtypes=float32,bfloat16,float16] [--branches=band,dense] \
        [--streams=0000,0011,1111,1100] [--stream_dtypes=f32] \
        [--dropout=off,rows] [--passes=fwd,bwd] [--line_info] \
        [--ffi_include=DIR] [--no_cubins] [--aligned_for=L:G:r[,...]] \
        [--modules=DIR[,DIR...]]

writes

    DIR/libetc_attention_ffi.so     the XLA FFI handlers (host and CUDA)
    DIR/cubins/<variant>.cubin      Triton's ahead-of-time compiled kernels
    DIR/cubins/<variant>.meta       "<function> <shared bytes> <warps> <tile>"
    DIR/cubins/manifest.json        the variants, the target and Triton's version

One cubin of each branch kernel (`triton_attention`: the forward pass
`branch_forward`; the backward pass `branch_backward_queries` and, per
pattern, `branch_backward_keys`) per input dtype, head size, relative term
(with or without ids), first pattern (band or dense), stream flags and
dtype, and dropout: the names the CUDA handlers look up
(`variants.variant_name`, `etc_realformer/kernels/cc/cuda_handlers.h`).
The metadata's tile is the one along the launch grid's first axis (query
rows, BM; keys for the keys kernel, BN). By default what a 12-layer model
trains and runs with, with the benchmark's relative vocabulary and
without ids: both passes, both branches, the streams of its first, middle
and last layers, recomputed streams and none (float32 sums), dropout on
(rows first) and off (`--passes=fwd`: inference only): for one dtype 160
cubins, 6.5 MiB (without source lines: `--line_info` keeps them, at some
3x the size). `--aligned_for` adds each of them aligned for a shape: its
lengths that are multiples of 16 declared so (`variants.aligned_digits`),
which Triton's loads and stores they stride then vectorize; a handler
launches a call's aligned cubin where the build has it, else the plain
one. `--modules` adds every cubin that exported modules launch, aligned
for their calls' lengths (`tools.kernels.module_variants` reads their
custom calls), so that a GPU run never meets a call whose cubin was not
built. The backward's queries kernel unrolls its per-id sums over R, the
longest compiles (R = 32: some 20 s each), which the build starts first.

Triton compiles for a GPU target without a GPU (`triton.compile(
ASTSource(...), target=GPUTarget("cuda", arch, 32))`), so this runs on any
machine with Triton, in `--jobs` processes; the library needs a C++17
compiler and the XLA FFI headers (TensorFlow's `include` folder, else
jax's `jax.ffi.include_dir()`).

The build itself is the library's (`etc_realformer.kernels.build`, and
`ffi_library` for the library), imported without the package
(`tools.kernels.standalone`): Triton cannot load into a process that has
loaded TensorFlow (their LLVM options collide), and the GPU machine has no
TensorFlow.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import List, Optional, Sequence, Tuple

from tools.kernels import kernel_grids
from tools.kernels import standalone

with standalone.bare_packages():
  from etc_realformer.kernels import build  # pylint: disable=g-import-not-at-top
  from etc_realformer.kernels import ffi_library  # pylint: disable=g-import-not-at-top
  from etc_realformer.kernels import format as kernel_format  # pylint: disable=g-import-not-at-top
  from etc_realformer.kernels import variants as kernel_variants  # pylint: disable=g-import-not-at-top

ROOT = pathlib.Path(__file__).resolve().parents[2]


class UsageError(ValueError):
  """A flag's value the build cannot take (one line, exit status 2)."""


def modules_variants(paths: Sequence[str]) -> List[kernel_variants.Variant]:
  """The variants that the exported modules under `paths` launch
  (`tools.kernels.module_variants`), read in a child process: jaxlib reads the
  modules, and this process loads Triton."""
  result = subprocess.run(
      [sys.executable, "-m", "tools.kernels.module_variants", "--json",
       "--modules=" + ",".join(os.path.abspath(p) for p in paths)],
      cwd=ROOT, capture_output=True, text=True, check=False)
  if result.returncode != 0:
    raise ValueError(result.stderr.strip().splitlines()[-1]
                     if result.stderr.strip() else "module_variants failed")
  return [kernel_variants.Variant(**fields)
          for fields in json.loads(result.stdout)]


def _list(text: str) -> List[str]:
  return [v for v in text.split(",") if v]


def _parser() -> argparse.ArgumentParser:
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
  parser.add_argument("--dtypes", default=",".join(kernel_variants.DTYPES),
                      help="comma list of input dtypes")
  parser.add_argument("--branches", default=",".join(kernel_format.BRANCHES),
                      help="comma list of first patterns: band (the sparse "
                      "long branch), dense (the global branch, the full path's "
                      "long branch)")
  parser.add_argument("--streams",
                      default=",".join(kernel_variants.DEFAULT_STREAMS),
                      help="comma list of stream flags READ1 READ2 WRITE1 "
                      "WRITE2 as 0/1 digits, READ digits \"s\" for sums made "
                      "from the sources (default: a 12-layer model's)")
  parser.add_argument("--stream_dtypes", default="f32",
                      help="comma list of the running sums' dtypes: f32, "
                      "low (the inputs' dtype)")
  parser.add_argument("--dropout", default="off,rows",
                      help="comma list of dropout variants: off, rows (the "
                      "index rows first), whole (row-major)")
  parser.add_argument("--passes", default=",".join(kernel_variants.PASSES),
                      help="comma list of passes: fwd (branch_forward), bwd "
                      "(branch_backward_queries, branch_backward_keys)")
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
  return parser


def _checked_lists(args: argparse.Namespace) -> Tuple[List[str], ...]:
  """The comma lists of the variants' flags, each checked against what it
  may hold: dtypes, branches, streams, stream dtypes, dropout, passes."""
  lists = (("dtypes", kernel_variants.DTYPES),
           ("branches", kernel_format.BRANCHES),
           ("streams", kernel_variants.STREAM_FLAGS),
           ("stream_dtypes", ("f32", "low")),
           ("dropout", kernel_variants.DROPOUT_LAYOUTS),
           ("passes", kernel_variants.PASSES))
  found = []
  for flag, allowed in lists:
    values = _list(getattr(args, flag))
    bad = [v for v in values if v not in allowed]
    if bad or not values:
      raise UsageError(f"--{flag} {bad}: not one of {list(allowed)}")
    found.append(values)
  return tuple(found)


def _aligned_shapes(text: str) -> List[Tuple[bool, int, int, int, int]]:
  """`--aligned_for`'s L:G:r shapes as branch lengths
  (`kernel_grids.branch_lengths`)."""
  shapes = []
  for shape in _list(text):
    fields = shape.split(":")
    if len(fields) != 3 or not all(f.isdigit() and int(f) > 0
                                   for f in fields):
      raise UsageError(f"--aligned_for {shape!r}: not L:G:r, three "
                       f"positive integers")
    shapes += kernel_grids.branch_lengths(*map(int, fields))
  return shapes


def _write_library(args: argparse.Namespace) -> None:
  include = args.ffi_include or build.default_ffi_include()
  if include is None:
    raise UsageError("no XLA FFI headers found (install tensorflow or jax, "
                     "or pass --ffi_include)")
  try:
    path = ffi_library.build_library(args.output_dir, include)
  except ffi_library.KernelBuildError as e:
    raise UsageError(str(e)) from e
  print(f"library: {path}")


def _variants(args: argparse.Namespace, lists: Tuple[List[str], ...],
              shapes: Sequence[Tuple[bool, int, int, int, int]]
              ) -> List[kernel_variants.Variant]:
  """The flags' variants, then those the `--modules` launch beyond them."""
  dtypes, branches, streams, stream_dtypes, dropout, passes = lists
  found = build.build_variants(
      dtypes, [int(v) for v in _list(args.head_sizes)],
      [int(v) for v in _list(args.relative_vocab_sizes)], branches, streams,
      stream_dtypes, dropout, passes, shapes)
  if args.modules:
    try:
      launched = modules_variants(_list(args.modules))
    except ValueError as e:
      raise UsageError(f"--modules: {e}") from e
    names = {v.name for v in found}
    added = [v for v in launched if v.name not in names]
    print(f"modules: {len(launched)} cubins launched, {len(added)} beyond "
          f"the other flags'")
    found += added
  return found


def _write_cubins(args: argparse.Namespace,
                  variants: Sequence[kernel_variants.Variant]) -> None:
  build.compiler_environment(args.line_info)
  overrides = {name: value for name, value in (
      ("block_m", args.block_m), ("block_n", args.block_n),
      ("num_warps", args.num_warps), ("num_stages", args.num_stages),
      ("maxnreg", args.maxnreg)) if value}
  start = time.perf_counter()
  for entry in build.write_cubins(args.output_dir, variants, args.arch,
                                  build.kernel_tiles(overrides), args.jobs,
                                  worker_init=standalone.install):
    print(f"cubin: {entry['variant']} shared={entry['shared']} "
          f"registers={entry['registers']} spills={entry['spills']}")
  size = sum(p.stat().st_size for p in pathlib.Path(
      args.output_dir, "cubins").glob("*.cubin"))
  print(f"{len(variants)} cubins in {time.perf_counter() - start:.0f} s "
        f"({size / 2**20:.1f} MiB in the folder)")


def main(argv: Optional[List[str]] = None) -> int:
  args = _parser().parse_args(argv)
  try:
    lists = _checked_lists(args)
    shapes = _aligned_shapes(args.aligned_for)
    if not args.no_library:
      _write_library(args)
    if not args.no_cubins:
      with standalone.bare_packages():
        _write_cubins(args, _variants(args, lists, shapes))
  except UsageError as e:
    print(f"build_kernels: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
