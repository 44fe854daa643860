"""The fused attention kernels' build: Triton's cubins, ahead of time.

One cubin per variant (`variants.Variant`: a branch kernel of
`triton_attention` with its constexprs fixed), named as the CUDA handlers
look it up (`variants.variant_name`), with a metadata line beside it
("<function> <shared bytes> <warps> <tile>"; the tile along the launch
grid's first axis: query rows, keys for the keys kernel) and a manifest
of the variants, the target and Triton's version. Triton compiles for a
GPU target without a GPU (`triton.compile(ASTSource(...),
target=GPUTarget("cuda", arch, 32))`), in `jobs` processes; the slowest
variants (the queries kernel unrolls its per-id sums over R) start first.
The FFI library is `ffi_library.build_library`'s.

Imports the standard library, Triton (when compiling) and its sibling
modules alone: Triton cannot load into a process that has loaded
TensorFlow (their LLVM options collide), so its callers import it without
the package (`tools/kernels/standalone.py`).
"""

import concurrent.futures
import dataclasses
import importlib.util
import json
import multiprocessing
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from etc_realformer.kernels.format import FORWARD
from etc_realformer.kernels.format import KEYS
from etc_realformer.kernels.format import QUERIES
from etc_realformer.kernels.variants import DTYPES
from etc_realformer.kernels.variants import Variant
from etc_realformer.kernels.variants import aligned_variants
from etc_realformer.kernels.variants import default_variants
from etc_realformer.kernels.variants import padded_ids

# The branch kernels' arguments in order (`triton_attention`): pointers with
# their element type ("T": the inputs' dtype, "S": the running sums'),
# ints, floats; then the constexprs, not passed at launch.
BRANCH_POINTERS = (
    ("q", "T"), ("k1", "T"), ("v1", "T"), ("k2", "T"), ("v2", "T"),
    ("per_id", "fp32"), ("codes1", "i8"), ("codes2", "i8"),
    ("valid", "fp32"), ("prev1", "S"), ("prev2", "S"), ("src_q", "T"),
    ("src_k1", "T"), ("src_k2", "T"), ("seeds", "i32"), ("ctx", "T"),
    ("lse", "fp32"), ("new1", "S"), ("new2", "S"))
BRANCH_INTS = ("batch_size", "num_heads", "num_rows", "first_len",
               "second_len", "num_ids", "block_len", "codes1_stride",
               "num_sources", "keep_threshold")
BRANCH_FLOATS = ("gain", "scale1", "scale2")
BRANCH_CONSTEXPRS = ("D", "BM", "BN", "R", "BAND", "HAS_IDS", "READ1",
                     "READ2", "WRITE1", "WRITE2", "SOURCES", "DROPOUT",
                     "BY_ROWS", "IEEE")
QUERIES_POINTERS = BRANCH_POINTERS[:17] + (
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
                   "BAND_BRANCH")


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
    FORWARD: Signature(BRANCH_POINTERS, BRANCH_INTS, BRANCH_FLOATS,
                       BRANCH_CONSTEXPRS, "codes1_stride"),
    QUERIES: Signature(QUERIES_POINTERS, BRANCH_INTS, BRANCH_FLOATS,
                       BRANCH_CONSTEXPRS, "codes1_stride"),
    KEYS: Signature(KEYS_POINTERS, KEYS_INTS, ("gain", "scale"),
                    KEYS_CONSTEXPRS, "codes_stride"),
}

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
    # BAND: this pattern is the band (the band branch's first).
    values = dict(common, BAND=variant.band and variant.pattern == 1,
                  READ=read, WRITE=write, PATTERN=variant.pattern - 1,
                  BAND_BRANCH=variant.band)
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
  equals a dense pattern's key rows (`cc/branch_checks.h`: codes1 [B, N, K1]
  on the dense branch, codes2 [B, N, K2])."""
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


def compile_variant(variant: Variant, arch: int, tiles: Dict[str, int]
                    ) -> Dict[str, object]:
  """Compiles one variant: its cubin and metadata (picklable: the build's
  worker processes return it)."""
  import triton  # pylint: disable=g-import-not-at-top
  from triton.backends.compiler import GPUTarget  # pylint: disable=g-import-not-at-top
  from etc_realformer.kernels import triton_attention  # pylint: disable=g-import-not-at-top
  compiled = triton.compile(
      kernel_source(triton_attention, variant, tiles),
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
                 tiles: Dict[str, Dict[str, int]], jobs: int = 1,
                 worker_init: Optional[Callable[[], None]] = None
                 ) -> List[Dict[str, object]]:
  """Compiles every variant into `output_dir/cubins` (`jobs` processes)
  with its kernel's tiles (`tiles[kernel]`: block_m, block_n, num_warps,
  num_stages); returns the manifest's entries. `worker_init` runs first in
  each compiler process (a fresh interpreter, which imports this module
  by name)."""
  import triton  # pylint: disable=g-import-not-at-top
  folder = os.path.join(output_dir, "cubins")
  os.makedirs(folder, exist_ok=True)
  # The slowest first: the last workers to finish then hold short ones.
  order = sorted(variants, key=lambda v: -v.cost)
  if jobs > 1 and len(variants) > 1:
    # Fresh interpreters: Triton's compiler holds no state worth forking.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(
        min(jobs, len(variants)), mp_context=context,
        initializer=worker_init) as pool:
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


def compiler_environment(line_info: bool = False) -> None:
  """Triton's compiler options of the build: fused multiply-adds, and no
  source lines unless `line_info` (they triple a cubin's size; the GPU
  runs carry the build)."""
  os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
  if not line_info:
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"


def kernel_tiles(overrides: Dict[str, int]) -> Dict[str, Dict[str, int]]:
  """Each kernel's tiles (`triton_attention.TILES`: block_m, block_n,
  num_warps, num_stages) with `overrides` (those and maxnreg) over them."""
  from etc_realformer.kernels import triton_attention  # pylint: disable=g-import-not-at-top
  return {kernel: dict(shape, **overrides)
          for kernel, shape in triton_attention.TILES.items()}


def build_variants(dtypes: Sequence[str], head_sizes: Sequence[int],
                   relative_vocab_sizes: Sequence[int],
                   branches: Sequence[str], streams: Sequence[str],
                   stream_dtypes: Sequence[str], dropout: Sequence[str],
                   passes: Sequence[str],
                   aligned_for: Sequence[Tuple[bool, int, int, int, int]] = ()
                   ) -> List[Variant]:
  """Every combination's variant (`variants.default_variants`; each
  relative vocabulary rounded up to a power of two), then each aligned for
  the branch shapes `aligned_for` (`variants.aligned_variants`)."""
  ids_padded = sorted({padded_ids(v) for v in relative_vocab_sizes},
                      reverse=True)
  plain = default_variants(dtypes, head_sizes, ids_padded, branches, streams,
                           stream_dtypes, dropout, passes)
  return plain + aligned_variants(plain, aligned_for)
