"""The fused attention kernels' variants and their cubins' names.

A variant is one compiled kernel: `triton_attention`'s branch kernel (the
forward `branch_forward`; the backward's `branch_backward_queries` and, per
pattern, `branch_backward_keys`) with its constexprs fixed for one input
dtype, head size, relative vocabulary, first pattern (band or dense),
stream flags and dtype, and dropout layout, and optionally for the
lengths of one shape: those that are multiples of 16 declared so
(`aligned_digits`), which lets Triton vectorize the loads they stride.
Its name is the cubin's file name, which the CUDA handlers build from a
call (`cc/cuda_handlers.h`, `VariantName`) and which `variant_name` builds
alike (a test compiles the handlers' and compares); a handler takes a
call's aligned cubin where the build has one, else the plain one.

`build` compiles variants; `tools/kernels/module_variants.py` reads the
ones an exported module launches. Standard library only: neither Triton
nor TensorFlow nor jax is imported here.
"""

import dataclasses
import itertools
import os
from typing import Dict, List, Sequence, Tuple

from etc_realformer.kernels.format import BRANCHES
from etc_realformer.kernels.format import FORWARD
from etc_realformer.kernels.format import KERNELS
from etc_realformer.kernels.format import KEYS
from etc_realformer.kernels.format import QUERIES

DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

# The kernels of each pass (`--passes`).
PASSES = {"fwd": (FORWARD,), "bwd": (QUERIES, KEYS)}


# What the 12-layer benchmark runs, per branch: no stream, the first layer
# (emit only), the middle layers (read and emit), the last (read only),
# and with recomputed streams the layers after the first (read from the
# sources); flags READ1 READ2 WRITE1 WRITE2, a READ digit "s" when the
# previous sum is made from the earlier layers' queries and keys.
DEFAULT_STREAMS = ("0000", "0011", "1111", "1100", "ss00")
# Every valid --streams value: 0/1 flags, or READ digits "s" (recomputed
# streams: read from the sources, nothing written).
STREAM_FLAGS = tuple(
    ["".join(f) for f in itertools.product("01", repeat=4)] +
    [r1 + r2 + "00" for r1 in "0s" for r2 in "0s" if "s" in r1 + r2])
DROPOUT_LAYOUTS = ("off", "rows", "whole")
# Each kernel's length arguments (`triton_attention`) in the order of an
# aligned variant's digits.
ALIGNED_LENGTHS = {
    FORWARD: ("num_rows", "first_len", "second_len", "block_len"),
    QUERIES: ("num_rows", "first_len", "second_len", "block_len"),
    KEYS: ("num_rows", "key_rows", "block_len"),
}


@dataclasses.dataclass(frozen=True)
class Variant:
  """One cubin: a kernel's constexprs for one input dtype.

  Attributes:
    dtype: the inputs' dtype (`DTYPES`).
    head_size: D.
    ids_padded: the relative vocabulary rounded up to a power of two; 0:
      no relative ids.
    band: the branch's first pattern is the l2l band, else dense.
    streams: READ1, READ2, WRITE1, WRITE2 as "0"/"1" digits ("s": read
      from the sources, recomputed streams); the keys kernel: its
      pattern's READ, WRITE.
    low_streams: the running sums are in the inputs' dtype, not float32.
    dropout: the probabilities' hash dropout.
    by_rows: its index rows first (matters only with dropout).
    kernel: `FORWARD`, `QUERIES` or `KEYS`.
    pattern: the keys kernel's pattern (1: the first, 2: the second); 0
      for the others.
    aligned: one digit per `ALIGNED_LENGTHS[kernel]`, "1" where that
      length is declared a multiple of 16 (`aligned_digits`); "": none.
  """
  dtype: str
  head_size: int
  ids_padded: int
  band: bool
  streams: str = "0000"
  low_streams: bool = False
  dropout: bool = False
  by_rows: bool = True
  kernel: str = FORWARD
  pattern: int = 0
  aligned: str = ""

  @property
  def flags(self) -> Tuple[bool, ...]:
    return tuple(c != "0" for c in self.streams)

  @property
  def sources(self) -> bool:
    """The previous sums are made from the sources (SOURCES)."""
    return "s" in self.streams

  @property
  def tile(self) -> str:
    """The tile along the launch grid's first axis (the .meta's fourth
    field): key rows for the keys kernel, else query rows."""
    return "block_n" if self.kernel == KEYS else "block_m"

  @property
  def cost(self) -> int:
    """A rough order of compile times (the build starts the slowest
    first): the queries kernel unrolls its per-id sums over R."""
    return 1 + (self.ids_padded if self.kernel == QUERIES else 0)

  @property
  def stream_type(self) -> str:
    """The stream pointers' element type in the kernel's signature."""
    return DTYPES[self.dtype] if self.is_low else "fp32"

  @property
  def is_low(self) -> bool:
    return (self.low_streams and "1" in self.streams and
            self.dtype != "float32")

  @property
  def name(self) -> str:
    return variant_name(self.dtype, self.head_size, self.ids_padded,
                        self.band, self.streams, self.low_streams,
                        self.dropout, self.by_rows, self.kernel,
                        self.pattern, self.aligned)

  @property
  def plain(self) -> "Variant":
    """The same kernel for any lengths: what a handler launches when the
    build lacks this aligned one."""
    return dataclasses.replace(self, aligned="")

  def for_lengths(self, rows: int, first_len: int, second_len: int,
                  block_len: int) -> "Variant":
    """This kernel aligned for a branch's lengths (`aligned_digits`)."""
    return dataclasses.replace(self, aligned=aligned_digits(
        self.kernel, rows, first_len, second_len, block_len, self.pattern))

  @property
  def aligned_lengths(self) -> Tuple[str, ...]:
    """The length arguments this variant declares multiples of 16."""
    return tuple(name for name, digit in zip(ALIGNED_LENGTHS[self.kernel],
                                             self.aligned) if digit == "1")


def padded_ids(num_ids: int) -> int:
  """A relative vocabulary rounded up to a power of two, as the handlers
  round per_id's R (0: no relative ids)."""
  return 1 << max(num_ids - 1, 0).bit_length() if num_ids else 0


def aligned_digits(kernel: str, rows: int, first_len: int, second_len: int,
                   block_len: int, pattern: int = 0) -> str:
  """Which of a kernel's lengths (`ALIGNED_LENGTHS`) are multiples of 16
  for a branch's shape, as digits ("" when none is), as the handlers
  reckon them (`cc/cuda_handlers.h`, `AlignedDigits`).

  Args:
    kernel: `FORWARD`, `QUERIES` or `KEYS`.
    rows: the branch's query rows N.
    first_len, second_len: each pattern's key rows (the band's: N + 2b).
    block_len: b on the band branch, 1 on the dense one.
    pattern: the keys kernel's pattern (1, 2).
  """
  if kernel == KEYS:
    lengths = (rows, (first_len, second_len)[pattern - 1], block_len)
  else:
    lengths = (rows, first_len, second_len, block_len)
  digits = "".join("1" if n % 16 == 0 else "0" for n in lengths)
  return digits if "1" in digits else ""


def variant_name(dtype: str, head_size: int, ids_padded: int, band: bool,
                 streams: str = "0000", low_streams: bool = False,
                 dropout: bool = False, by_rows: bool = True,
                 kernel: str = FORWARD, pattern: int = 0,
                 aligned: str = "") -> str:
  """The cubin's name, as the CUDA handlers build it from the call
  (`cc/cuda_handlers.h`, `VariantName`). The forward's and the backward's
  queries kernel (`kernel` branch_forward, branch_backward_queries):

    <kernel>_<dtype>_d<D>_<r<R>|noids>_<band|dense>_<f32|low>_
    <READ1><READ2><WRITE1><WRITE2>_<drop|nodrop>_<rows|whole>

  and the backward's keys kernel of one pattern (`pattern` 1 or 2):

    branch_backward_keys_<dtype>_d<D>_<r<R>|noids>_<band|dense>_p<1|2>_
    <f32|low>_<READ><WRITE>_<drop|nodrop>_<rows|whole>

  dtype float32, bfloat16 or float16; R the relative vocabulary rounded up
  to a power of two (`ids_padded`; 0: no relative ids, "noids"); band or
  dense the branch's first pattern; the stream flags as 0/1 digits
  (`streams`: four, or the keys kernel's pattern's two); "low" only when
  one of those streams is read or written, in the inputs' dtype, and that
  dtype is not float32, else "f32" (one name per distinct kernel); "rows"
  whenever dropout is off (the index layout matters only with dropout).
  A READ digit "s" reads the previous sum from the sources (recomputed
  streams: the earlier layers' queries and keys), never beside a "1".
  An aligned variant (`aligned` holds a "1") ends in "_a<digits>".
  """
  keys = kernel == KEYS
  if kernel not in KERNELS:
    raise ValueError(f"kernel {kernel!r}: one of {list(KERNELS)}")
  if keys != (pattern in (1, 2)) or (not keys and pattern):
    raise ValueError(f"pattern {pattern}: 1 or 2 for {KEYS}, else 0")
  digits = 2 if keys else 4
  reads = digits // 2
  if (len(streams) != digits or set(streams) - {"0", "1", "s"} or
      "s" in streams[reads:] or ("s" in streams and "1" in streams)):
    raise ValueError(f"streams {streams!r}: {digits} 0/1 digits, or \"s\" "
                     f"for the READ ones alone")
  lengths = len(ALIGNED_LENGTHS[kernel])
  if aligned and (len(aligned) != lengths or set(aligned) - {"0", "1"}):
    raise ValueError(f"aligned {aligned!r}: {lengths} 0/1 digits "
                     f"({', '.join(ALIGNED_LENGTHS[kernel])}), or \"\"")
  low = low_streams and "1" in streams and dtype != "float32"
  return (f"{kernel}_{dtype}_d{head_size}_"
          f"{f'r{ids_padded}' if ids_padded else 'noids'}_"
          f"{'band' if band else 'dense'}_"
          f"{f'p{pattern}_' if keys else ''}{'low' if low else 'f32'}_"
          f"{streams}_{'drop' if dropout else 'nodrop'}_"
          f"{'rows' if by_rows or not dropout else 'whole'}"
          f"{f'_a{aligned}' if '1' in aligned else ''}")


def launched(variant: Variant, cubin_dir: str) -> Variant:
  """The variant a handler launches for a call that wants `variant`: it,
  where `cubin_dir` holds its cubin, else the plain one (`cc/cuda_handlers.h`,
  `LoadVariant`)."""
  if launched_name(variant.name, cubin_dir) == variant.name:
    return variant
  return variant.plain


def launched_name(name: str, cubin_dir: str) -> str:
  """`launched` by name: an aligned name ("..._a<digits>") where
  `cubin_dir` holds its cubin, else the plain one."""
  plain, _, digits = name.rpartition("_a")
  if not plain or not digits.isdigit() or os.path.exists(
      os.path.join(cubin_dir, name + ".meta")):
    return name
  return plain


def default_variants(dtypes: Sequence[str], head_sizes: Sequence[int],
                     ids_padded: Sequence[int],
                     branches: Sequence[str] = BRANCHES,
                     streams: Sequence[str] = DEFAULT_STREAMS,
                     stream_dtypes: Sequence[str] = ("f32",),
                     dropout: Sequence[str] = ("off", "rows"),
                     passes: Sequence[str] = tuple(PASSES)
                     ) -> List[Variant]:
  """Every combination, one per distinct name (in order: the forward's,
  the backward's queries kernels, its keys kernels)."""
  kernels = [k for p in passes for k in PASSES[p]]
  out: Dict[str, Variant] = {}
  for kernel in (FORWARD, QUERIES, KEYS):
    if kernel not in kernels:
      continue
    for dtype, d, ids, branch, flags, low, drop in itertools.product(
        dtypes, head_sizes, ids_padded, branches, streams, stream_dtypes,
        dropout):
      common = dict(dtype=dtype, head_size=d, ids_padded=ids,
                    band=branch == "band", low_streams=low == "low",
                    dropout=drop != "off", by_rows=drop != "whole",
                    kernel=kernel)
      if kernel == KEYS:  # one per pattern: its READ and WRITE flags
        found = [Variant(streams=flags[p] + flags[p + 2], pattern=p + 1,
                         **common) for p in range(2)]
      else:
        found = [Variant(streams=flags, **common)]
      for v in found:
        out.setdefault(v.name, v)
  return list(out.values())


def aligned_variants(variants: Sequence[Variant],
                     branches: Sequence[Tuple[bool, int, int, int, int]]
                     ) -> List[Variant]:
  """Each variant aligned for each branch shape of its kind that has a
  length multiple of 16 (`aligned_digits`), each once, in order.

  Args:
    variants: plain variants.
    branches: (band, rows, first_len, second_len, block_len) per branch shape
      (`kernel_grids.branch_lengths`).
  """
  out: Dict[str, Variant] = {}
  for v in variants:
    for band, rows, first_len, second_len, block_len in branches:
      if band != v.band:
        continue
      digits = aligned_digits(v.kernel, rows, first_len, second_len,
                              block_len, v.pattern)
      if digits:
        aligned = dataclasses.replace(v, aligned=digits)
        out.setdefault(aligned.name, aligned)
  return list(out.values())
