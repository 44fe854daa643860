r"""The fused kernels' machine code, counted: where a step's instructions go.

    python -m tools.kernels.kernel_sass --cubin_dir=build/kernels/cubins \
        [--batch_size=4] [--num_heads=12] [--long_len=4096] \
        [--global_len=256] [--local_radius=84] [--relative_max_distance=12] \
        [--tokens_per_sentence=16] [--streams=1111] [--num_sources=11] \
        [--no_dropout] [--top_lines=8] [--sms=132] [--clock_ghz=1.98] \
        [--output_jsonl=PATH]

Reads each cubin's SASS (`nvdisasm`, from Triton's wheel), finds its
loops (backward branches), and counts per class of instruction (tensor
products, float32 math, integer and logic, conversions, memory, ...) what
one tile costs and what one layer's launch issues at the benchmark's
shape: each loop's body times the tiles its loops visit (`kernel_grids`,
with the tiles the folder's `manifest.json` says the cubins were built
with), and for the backward queries kernel's per-id sums (`_id_sums`: one
masked row sum per relative id a tile holds) the ids each tile holds,
from ETC's id rules at that shape (`per_id_trips`); with recomputed
streams (`--streams=ss00`) each tile's loop over the `--num_sources`
earlier layers. Built with `--line_info`
(`tools/kernels/build_kernels.py`), the cubins also say which source lines issue
the most.

A count, not a time: a multiprocessor issues at most one instruction per
cycle per scheduler (4 on sm_80 and sm_90), so a launch's warp
instructions over (SMs x 4 x clock) is a floor on its time that no
latency, stall or unit throughput is in; `--clock_ghz` is the H100 and
H200's boost clock. How near a kernel comes to it depends on the warps a
multiprocessor holds to hide each one's latencies (`warps / SM`, from
the cubin's registers and shared memory). The straight-line code
(outside every loop) is counted once per program, whatever branches
skip.

No GPU, Triton import or TensorFlow needed: nvdisasm runs on the CPU.
"""

import argparse
import collections
import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import re
import subprocess
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from tools.kernels import kernel_grids
from tools.kernels import standalone

with standalone.bare_packages():
  from etc_realformer.kernels import variants as kernel_variants  # pylint: disable=g-import-not-at-top

# Instruction classes, by the opcode's first word (Hopper and Ampere SASS).
CLASSES: Dict[str, Tuple[str, ...]] = {
    "tensor": ("HMMA", "HGMMA", "IMMA", "BMMA", "QMMA", "WARPGROUP"),
    "fp32": ("FFMA", "FADD", "FMUL", "FMNMX", "FSETP", "FSEL", "FSET",
             "FCHK", "FSWZADD", "FRND"),
    "fp16x2": ("HADD2", "HMUL2", "HFMA2", "HMNMX2", "HSETP2", "HSET2"),
    "special": ("MUFU",),
    "convert": ("F2F", "F2I", "I2F", "F2FP", "I2FP", "F2IP", "I2I"),
    "int": ("IMAD", "IADD3", "IADD", "LOP3", "ISETP", "SEL", "SHF", "LEA",
            "PRMT", "IABS", "IMNMX", "VIMNMX", "SGXT", "MOV", "IMUL", "POPC",
            "FLO", "BMSK", "BREV", "PLOP3", "P2R", "R2P", "LOP", "SHL",
            "SHR", "CS2R", "VOTE", "IDP", "BFE", "BFI", "VIADD", "VIMNMX3",
            "VIADDMNMX", "REDUX"),
    "shuffle": ("SHFL",),  # row reductions across a warp's lanes
    "uniform": ("ULDC", "UIADD3", "UMOV", "ULOP3", "USHF", "UISETP", "USEL",
                "UIMAD", "ULEA", "UPRMT", "UFLO", "UPOPC", "UBMSK", "UPLOP3",
                "S2UR", "R2UR", "VOTEU", "USGXT", "UP2UR", "ULOP"),
    "global": ("LDG", "STG", "RED", "ATOM", "ATOMG", "LD", "ST", "REDG",
               "LDGDEPBAR", "UBLKCP", "UTMALDG", "UTMASTG"),
    "shared": ("LDS", "STS", "LDSM", "LDGSTS", "ATOMS", "STSM"),
    "local": ("LDL", "STL"),  # spilled registers
    "constant": ("LDC",),
    "control": ("BRA", "BRX", "EXIT", "BSSY", "BSYNC", "WARPSYNC", "BAR",
                "DEPBAR", "NOP", "YIELD", "CALL", "RET", "S2R", "MEMBAR",
                "ERRBAR", "CCTL", "JMP", "SYNCS", "ELECT", "ENDCOLLECTIVE",
                "FENCE", "ARRIVES"),
}
_CLASS_OF = {op: name for name, ops in CLASSES.items() for op in ops}
CLASS_ORDER = tuple(CLASSES) + ("other",)
# Warp instructions a multiprocessor issues per cycle (one per scheduler).
ISSUE_PER_SM_CYCLE = 4
# A Hopper multiprocessor's limits (sm_90): registers, shared memory a
# block may use, warps.
SM_REGISTERS = 65536
SM_SHARED_BYTES = 227 * 1024
SM_WARPS = 64

_LINE = re.compile(r'//## File "(?P<file>[^"]+)", line (?P<line>\d+)')
_INSTRUCTION = re.compile(
    r"^\s*/\*(?P<address>[0-9a-f]+)\*/\s+(?:@!?U?P[T0-9]+\s+)?"
    r"(?P<opcode>[A-Z][A-Z0-9_.]*)(?P<rest>.*)$")
_LABEL = re.compile(r"^(?P<label>\.L_x_\d+):")
_TARGET = re.compile(r"\(?(?P<label>\.L_x_\d+)\)?")


def op_class(opcode: str) -> str:
  """The class of a SASS opcode (`HMMA.16816.F32.BF16` -> "tensor")."""
  return _CLASS_OF.get(opcode.split(".")[0], "other")


@dataclasses.dataclass(frozen=True)
class Instruction:
  """One SASS instruction: its opcode, its source file and line ("", 0:
  none; Triton's own for its library functions, `tl.sum`'s combine) and
  the label it branches to (None: it does not)."""
  opcode: str
  line: int = 0
  target: Optional[str] = None
  file: str = ""


@dataclasses.dataclass(frozen=True)
class Loop:
  """Instructions [start, end] (end: the branch back to start)."""
  start: int
  end: int

  @property
  def size(self) -> int:
    return self.end - self.start + 1

  def holds(self, other: "Loop") -> bool:
    return (self.start <= other.start and other.end <= self.end and
            self != other)


@dataclasses.dataclass
class Sass:
  """A cubin's instructions and the index each label names."""
  instructions: List[Instruction]
  labels: Dict[str, int]


def cuda_tool(name: str) -> str:
  """`nvdisasm` or `cuobjdump`: $NVDISASM / $CUOBJDUMP, else the one in
  Triton's wheel (found without importing Triton, which cannot share a
  process with TensorFlow), else PATH's."""
  if os.environ.get(name.upper()):
    return os.environ[name.upper()]
  spec = importlib.util.find_spec("triton")
  if spec is not None and spec.submodule_search_locations:
    path = (pathlib.Path(list(spec.submodule_search_locations)[0]) /
            "backends" / "nvidia" / "bin" / name)
    if path.exists():
      return str(path)
  return name


def registers(cubin: str) -> int:
  """Registers a thread of the cubin's kernel uses (`cuobjdump
  -res-usage`)."""
  result = subprocess.run([cuda_tool("cuobjdump"), "-res-usage", cubin],
                          capture_output=True, text=True, check=False)
  found = re.search(r"REG:(\d+)", result.stdout)
  if result.returncode != 0 or not found:
    raise RuntimeError(f"cuobjdump {cubin}: {result.stderr.strip()}")
  return int(found.group(1))


def resident_warps(regs: int, shared_bytes: int, warps: int) -> int:
  """Warps of a kernel's programs one multiprocessor holds at once:
  registers are allocated per warp in units of 256, shared memory per
  program."""
  per_warp = math.ceil(regs * 32 / 256) * 256
  programs = min(SM_REGISTERS // (per_warp * warps),
                 SM_SHARED_BYTES // max(shared_bytes, 1),
                 SM_WARPS // warps)
  return programs * warps


def parse(text: str) -> Sass:
  """`nvdisasm -c -g` output -> `Sass` (source lines where the cubin
  keeps them)."""
  instructions: List[Instruction] = []
  labels: Dict[str, int] = {}
  line, file = 0, ""
  for raw in text.splitlines():
    found = _LINE.search(raw)
    if found:
      line, file = int(found.group("line")), found.group("file")
      continue
    found = _LABEL.match(raw)
    if found:
      labels[found.group("label")] = len(instructions)
      continue
    found = _INSTRUCTION.match(raw)
    if not found:
      continue
    opcode = found.group("opcode")
    target = None
    if opcode.split(".")[0] in ("BRA", "JMP"):
      label = _TARGET.search(found.group("rest"))
      target = label.group("label") if label else None
    instructions.append(Instruction(opcode, line, target, file))
  return Sass(instructions, labels)


def disassemble(cubin: str, nvdisasm: Optional[str] = None) -> Sass:
  result = subprocess.run([nvdisasm or cuda_tool("nvdisasm"), "-c", "-g",
                           cubin],
                          capture_output=True, text=True, check=False)
  if result.returncode != 0:
    raise RuntimeError(f"nvdisasm {cubin}: {result.stderr.strip()}")
  return parse(result.stdout)


def loops(sass: Sass) -> List[Loop]:
  """Every loop, outer before inner in source order: a branch back to an
  earlier label. The branch-to-itself that pads a kernel's end (after its
  last EXIT) is not a loop."""
  last_exit = max((i for i, ins in enumerate(sass.instructions)
                   if ins.opcode.startswith("EXIT")), default=-1)
  found = []
  for i, ins in enumerate(sass.instructions):
    start = sass.labels.get(ins.target) if ins.target else None
    if start is not None and start <= i and not (start == i and
                                                 i > last_exit):
      found.append(Loop(start, i))
  return sorted(found, key=lambda l: (l.start, -l.end))


def outer_loops(found: Sequence[Loop]) -> List[Loop]:
  return [l for l in found if not any(o.holds(l) for o in found)]


def inner_loops(found: Sequence[Loop], outer: Loop) -> List[Loop]:
  return [l for l in found if outer.holds(l)]


def counts(sass: Sass, loop: Loop,
           without: Sequence[Loop] = ()) -> collections.Counter:
  """Instructions per class of `loop`'s body, less those of the loops
  `without` (its inner loops)."""
  skip = set()
  for l in without:
    skip.update(range(l.start, l.end + 1))
  return collections.Counter(op_class(sass.instructions[i].opcode)
                             for i in range(loop.start, loop.end + 1)
                             if i not in skip)


# ------------------------------------------------------------ trip counts
def distance_id(d: int, m: int) -> int:
  """ETC's relative id of a distance (key - query): 0 for the query
  itself, d up to M to the right, M + |d| up to 2M to the left.

  `features.relative_positions.relative_ids_from_offsets`' rule, for one
  integer (that one is TensorFlow's, which this tool does not load); the
  tests hold the two together through `make_global_local_side_inputs`."""
  return min(d, m) if d >= 0 else m + min(-d, m)


def _distance_trips(low: int, high: int, m: int) -> int:
  """The per-id loop's trips over distances [low, high]: from the smallest
  id they hold to the largest (`_id_sums`' first..last)."""
  ids = []
  if high >= 0:  # the right: ids max(low, 0)..high, clipped at M
    ids += [distance_id(max(low, 0), m), distance_id(high, m)]
  if low < 0:  # the left: M + 1.. by |d|, clipped at 2M
    ids += [distance_id(min(high, -1), m), distance_id(low, m)]
  return max(ids) - min(ids) + 1


def _band_id_trips(rows: int, block_len: int, rmax: int, block_m: int,
                   block_n: int) -> int:
  """The per-id loop's trips over every band tile of one head: per tile,
  from the smallest to the largest relative id its window cells hold
  (`_id_sums`' first..last). A cell (query i, padded key row k) lies in
  the window when its distance d = k - b - i is at most b - 1 either way;
  its id is ETC's (`distance_id`)."""
  b = block_len
  total = 0
  for m0 in range(0, rows, block_m):
    last_row = min(m0 + block_m, rows) - 1
    start, stop = kernel_grids.band_key_rows(m0, rows, b, block_m)
    for n0 in range(start, stop, block_n):
      low = max(n0 - b - last_row, -(b - 1))
      high = min(n0 + block_n - 1 - b - m0, b - 1)
      if low <= high:
        total += _distance_trips(low, high, rmax)
  return total


def _sentence_id_trips(rows: int, keys: int, block_m: int, block_n: int,
                       sentence_of_row, sentence_of_key) -> int:
  """The per-id loop's trips over every tile of a sentence pattern (l2g,
  g2l: ids "other sentence" and "own sentence", adjacent): 2 where a tile
  pairs a token with its own sentence's, else 1."""
  total = 0
  for m0 in range(0, rows, block_m):
    row_sentences = {sentence_of_row(i)
                     for i in range(m0, min(m0 + block_m, rows))}
    for n0 in range(0, keys, block_n):
      key_sentences = {sentence_of_key(j)
                       for j in range(n0, min(n0 + block_n, keys))}
      total += 2 if row_sentences & key_sentences else 1
  return total


def _dense_distance_trips(rows: int, keys: int, rmax: int, block_m: int,
                          block_n: int) -> int:
  """As `_band_id_trips` for g2g: every pair's distance has its id."""
  total = 0
  for m0 in range(0, rows, block_m):
    for n0 in range(0, keys, block_n):
      low = n0 - (min(m0 + block_m, rows) - 1)
      high = min(n0 + block_n, keys) - 1 - m0
      total += _distance_trips(low, high, rmax)
  return total


def per_id_trips(long_len: int, global_len: int, local_radius: int,
                 relative_max_distance: int, tokens_per_sentence: int,
                 block_m: int, block_n: int) -> Dict[str, Tuple[int, int]]:
  """Per branch, the backward queries kernel's per-id loop trips over all
  tiles of one head, per pattern loop (first, second): the long branch's
  N = L padded to whole blocks over the band and G, the global branch's G
  over G and the L long keys.

  ETC's ids at the benchmark's inputs (`tools.bench.benchmark_worker.
  global_local_inputs`): long token i is in sentence min(i // t, G - 1),
  global token g is sentence g; every cell has an id, masked or not."""
  (_, n, _, _, b), _, _ = kernel_grids.branch_lengths(long_len, global_len,
                                                      local_radius)
  t = tokens_per_sentence

  def sentence(i: int) -> int:
    return min(i // t, global_len - 1)

  return {
      "long": (_band_id_trips(n, b, relative_max_distance, block_m, block_n),
               _sentence_id_trips(n, global_len, block_m, block_n, sentence,
                                  lambda g: g)),
      "global": (_dense_distance_trips(global_len, global_len,
                                       relative_max_distance, block_m,
                                       block_n),
                 _sentence_id_trips(global_len, long_len, block_m, block_n,
                                    lambda g: g, sentence)),
  }


# ------------------------------------------------------------ the launches
@dataclasses.dataclass(frozen=True)
class Launch:
  """One layer's launch of a kernel: its grid and its cubin's variant."""
  grid: kernel_grids.Grid
  variant: kernel_variants.Variant
  branch: str  # "long" or "global"


def launches(grids: Sequence[kernel_grids.Grid], dtype: str, head_size: int,
             ids_padded: int, streams: str, dropout: bool,
             lengths: Optional[Dict[str, Tuple[int, int, int, int]]] = None
             ) -> List[Launch]:
  """`kernel_grids.grids`' launches with their variants (the middle
  layer's: `streams` for the queries kernels, the matching pattern's two
  flags for the keys kernels), aligned for each branch's `lengths` (rows,
  first_len, second_len, block_len; `kernel_grids.branch_lengths`) where
  given."""
  out = []
  keys_flags = {1: streams[0] + streams[2], 2: streams[1] + streams[3]}
  for grid in grids:
    flags = keys_flags[grid.pattern] if grid.pattern else streams
    variant = kernel_variants.Variant(
        dtype=dtype, head_size=head_size, ids_padded=ids_padded,
        band=grid.branch == "long", streams=flags, dropout=dropout,
        kernel=grid.kernel, pattern=grid.pattern)
    if lengths:
      variant = variant.for_lengths(*lengths[grid.branch])
    out.append(Launch(grid, variant, grid.branch))
  return out


# An inner loop of a tile's loop, as `profile` takes it: what it is
# ("ids": the per-id sums; "sources": the earlier layers' products of
# recomputed streams) and its trips over all tiles of that loop.
Inner = Tuple[str, int]


def inner_loops_of(launch: Launch, id_trips: Dict[str, Tuple[int, int]],
                   heads: int, num_sources: int) -> List[List[Inner]]:
  """Per loop of a launch's kernel (a pattern's keys; the keys kernel's
  one, over queries), the inner loops its code holds, in code order: the
  earlier layers' products where the pattern's sum is recomputed (a trip
  per source layer and tile), then the backward queries kernel's per-id
  sums (`per_id_trips`, for all heads)."""
  variant = launch.variant
  tiles = launch.grid.loop_tiles()
  if variant.kernel == kernel_variants.KEYS:
    reads = [variant.streams[0]]
  else:
    reads = list(variant.streams[:2])
  out = []
  for k, read in enumerate(reads):
    inner: List[Inner] = []
    if read == "s":
      inner.append(("sources", tiles[k] * num_sources))
    if variant.kernel == kernel_variants.QUERIES and variant.ids_padded:
      inner.append(("ids", id_trips[launch.branch][k] * heads))
    out.append(inner)
  return out


@dataclasses.dataclass
class Profile:
  """One launch counted: per class, the instructions of one tile of each
  loop (less its inner loops) and of one trip of each inner loop, and
  the launch's warp instructions."""
  name: str
  warps: int
  programs: int
  loop_tiles: Tuple[int, ...]
  per_tile: List[collections.Counter]  # each loop's body, less its inner
  inner: List[List[Tuple[str, int, int]]]  # (what, body, trips) per loop
  issued: collections.Counter  # warp instructions of the launch
  inner_issued: collections.Counter  # of those, each kind of inner loop's
  lines: collections.Counter  # warp instructions per (file, line)
  resident: int = 0  # warps a multiprocessor holds (0: not known)

  def floor_ms(self, sms: int, clock_ghz: float) -> float:
    cycles = sum(self.issued.values()) / (sms * ISSUE_PER_SM_CYCLE)
    return cycles / (clock_ghz * 1e6)


def profile(sass: Sass, name: str, warps: int, programs: int,
            loop_tiles: Sequence[int],
            inner: Sequence[Sequence[Inner]] = ()) -> Profile:
  """Counts a launch: each outer loop's body (less its inner loops) times
  `loop_tiles[k]`; its inner loops, in code order, each body times the
  trips `inner[k]` gives it; the rest once per program; all times
  `warps`."""
  found = loops(sass)
  outer = outer_loops(found)
  if len(outer) != len(loop_tiles):
    raise ValueError(f"{name}: {len(outer)} loops in the code, "
                     f"{len(loop_tiles)} in the grid")
  weights = [programs] * len(sass.instructions)
  kind = [""] * len(sass.instructions)
  per_tile, inner_counted = [], []
  expected = list(inner) + [()] * (len(outer) - len(inner))
  for loop, tiles, named in zip(outer, loop_tiles, expected):
    held = inner_loops(found, loop)
    if len(held) != len(named):
      raise ValueError(f"{name}: {len(held)} loops inside a loop of the "
                       f"code, {len(named)} expected ({named})")
    for i in range(loop.start, loop.end + 1):
      weights[i] = tiles
    for l, (what, trips) in zip(held, named):
      for i in range(l.start, l.end + 1):
        weights[i], kind[i] = trips, what
    per_tile.append(counts(sass, loop, held))
    inner_counted.append([(what, l.size, trips)
                          for l, (what, trips) in zip(held, named)])
  issued: collections.Counter = collections.Counter()
  inner_issued: collections.Counter = collections.Counter()
  lines: collections.Counter = collections.Counter()
  for ins, weight, what in zip(sass.instructions, weights, kind):
    issued[op_class(ins.opcode)] += weight * warps
    lines[ins.file, ins.line] += weight * warps
    if what:
      inner_issued[what] += weight * warps
  return Profile(name, warps, programs, tuple(loop_tiles), per_tile,
                 inner_counted, issued, inner_issued, lines)


def _mix(counter: collections.Counter) -> str:
  total = sum(counter.values())
  return ", ".join(f"{c} {counter[c] / total:.0%}" for c in CLASS_ORDER
                   if counter[c] and counter[c] / total >= 0.02)


def _source_line(file: str, line: int, cache: Dict[str, List[str]]) -> str:
  """The text of a source line, where the file is on this machine."""
  if file not in cache:
    try:
      cache[file] = pathlib.Path(file).read_text().splitlines()
    except OSError:
      cache[file] = []
  text = cache[file]
  return text[line - 1].strip() if 0 < line <= len(text) else "?"


def report(profiles: Sequence[Profile], sms: int, clock_ghz: float,
           top_lines: int = 0) -> List[str]:
  """Markdown: a row per launch, then each launch's busiest lines."""
  out = ["| launch | a tile's instructions, per loop | warp instructions "
         "(M) | floor (ms) | per-id sums | warps / SM | mix |",
         "| --- | --- | --- | --- | --- | --- | --- |"]
  for p in profiles:
    tile = " + ".join(
        str(sum(c.values())) + "".join(
            f" (+ {body} x {trips / tiles:.1f} {what})"
            for what, body, trips in inner if tiles)
        for c, inner, tiles in zip(p.per_tile, p.inner, p.loop_tiles))
    total = sum(p.issued.values())
    share = (f"{p.inner_issued['ids'] / total:.0%}" if p.inner_issued["ids"]
             else "-")
    out.append(f"| {p.name} | {tile} | {total / 1e6:.1f} | "
               f"{p.floor_ms(sms, clock_ghz):.3f} | {share} | "
               f"{p.resident or '?'} | {_mix(p.issued)} |")
  total = sum(p.floor_ms(sms, clock_ghz) for p in profiles)
  out.append(f"one layer, both branches, forward and backward: {total:.2f} ms "
             f"of issue at the least ({sms} SMs x {ISSUE_PER_SM_CYCLE} "
             f"per cycle at {clock_ghz} GHz)")
  cache: Dict[str, List[str]] = {}
  for p in profiles if top_lines else ():
    issued = sum(p.issued.values())
    if not any(line for _, line in p.lines):
      continue  # built without source lines
    out.append(f"{p.name}: the busiest source lines")
    for (file, line), n in p.lines.most_common(top_lines):
      text = _source_line(file, line, cache)
      out.append(f"  {n / issued:5.1%}  {pathlib.Path(file).name}:{line}: "
                 f"{text[:64]}")
  return out


class UsageError(ValueError):
  """A flag or cubin the count cannot take (one line, exit status 2)."""


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--cubin_dir", required=True)
  kernel_grids.add_shape_flags(parser)
  parser.add_argument("--relative_max_distance", type=int, default=12)
  parser.add_argument("--relative_vocab_size", type=int, default=32)
  parser.add_argument("--tokens_per_sentence", type=int, default=16)
  parser.add_argument("--head_size", type=int, default=64)
  parser.add_argument("--dtype", default="bfloat16",
                      choices=sorted(kernel_variants.DTYPES))
  parser.add_argument("--streams", default="1111",
                      help="READ1 READ2 WRITE1 WRITE2 (the middle layers'; "
                      "a READ digit s: recomputed from the sources)")
  parser.add_argument("--num_sources", type=int, default=11,
                      help="with recomputed streams: the earlier layers "
                      "(11: the twelfth layer's)")
  parser.add_argument("--no_dropout", action="store_true")
  parser.add_argument("--top_lines", type=int, default=8)
  parser.add_argument("--sms", type=int, default=132)
  parser.add_argument("--clock_ghz", type=float, default=1.98)
  parser.add_argument("--output_jsonl", default=None,
                      help="append a kernel_floor record per launch (its "
                      "cubin's variant name): tools.gpu.gpu_summary sets the "
                      "card's timings beside them")
  return parser


def _check_flags(args: argparse.Namespace) -> None:
  for name in (*kernel_grids.SHAPE_FLAGS, "tokens_per_sentence", "sms"):
    if getattr(args, name) < 1:
      raise UsageError(f"--{name} must be at least 1")
  if args.streams not in kernel_variants.STREAM_FLAGS:
    raise UsageError(f"--streams={args.streams}: four 0/1 flags (READ1 "
                     "READ2 WRITE1 WRITE2), or s for a READ with 00 after")


def _launched(args: argparse.Namespace, tiles: Dict[str, Dict[str, int]]
              ) -> List[Launch]:
  """The shape's launches, each with the cubin a handler launches for it:
  aligned for the shape's lengths where the build has it, else the plain
  one."""
  grids = kernel_grids.grids(args.batch_size, args.num_heads, args.long_len,
                             args.global_len, args.local_radius, tiles)
  long_branch, global_branch, _ = kernel_grids.branch_lengths(
      args.long_len, args.global_len, args.local_radius)
  lengths = {"long": long_branch[1:], "global": global_branch[1:]}
  return [dataclasses.replace(launch, variant=kernel_variants.launched(
      launch.variant, args.cubin_dir)) for launch in launches(
          grids, args.dtype, args.head_size,
          kernel_variants.padded_ids(args.relative_vocab_size),
          args.streams, not args.no_dropout, lengths)]


def _profile_launch(args: argparse.Namespace, launch: Launch,
                    tiles: Dict[str, Dict[str, int]],
                    trips: Dict[str, Tuple[int, int]]) -> Profile:
  """One launch's counts from its cubin (and its resident warps, from the
  cubin's metadata where the build wrote it)."""
  cubin = pathlib.Path(args.cubin_dir) / f"{launch.variant.name}.cubin"
  if not cubin.exists():
    raise UsageError(f"{cubin}: no such cubin (tools.kernels.build_kernels "
                     "builds it)")
  warps = tiles[launch.variant.kernel]["num_warps"]
  meta = cubin.with_suffix(".meta")  # "<function> <shared> <warps> <tile>"
  heads = args.batch_size * args.num_heads
  try:
    counted = profile(disassemble(str(cubin)), launch.grid.name, warps,
                      launch.grid.programs, launch.grid.loop_tiles(),
                      inner_loops_of(launch, trips, heads, args.num_sources))
    if meta.exists():
      counted.resident = resident_warps(
          registers(str(cubin)), int(meta.read_text().split()[1]), warps)
  except (OSError, RuntimeError, ValueError) as e:
    # No nvdisasm (Triton's wheel is not installed), or a cubin whose
    # loops are not the kernel's: one line, not a traceback.
    raise UsageError(f"{cubin}: {e}") from e
  return counted


def _floor_record(args: argparse.Namespace, launch: Launch,
                  counted: Profile) -> Dict[str, object]:
  return {"record_type": "kernel_floor", "variant": launch.variant.name,
          "launch": launch.grid.name,
          "floor_ms": counted.floor_ms(args.sms, args.clock_ghz),
          "warp_instructions": sum(counted.issued.values()),
          "resident_warps": counted.resident, "batch": args.batch_size,
          "num_heads": args.num_heads, "long_len": args.long_len,
          "global_len": args.global_len, "sms": args.sms,
          "clock_ghz": args.clock_ghz}


def main(argv: Optional[List[str]] = None) -> int:
  args = _parser().parse_args(argv)
  try:
    _check_flags(args)
    manifest = pathlib.Path(args.cubin_dir) / "manifest.json"
    # The tiles the cubins were built with (a sweep's differ from today's).
    tiles = (json.loads(manifest.read_text())["tiles"] if manifest.exists()
             else kernel_grids.tiles())
    queries = tiles[kernel_variants.QUERIES]
    trips = per_id_trips(args.long_len, args.global_len, args.local_radius,
                         args.relative_max_distance,
                         args.tokens_per_sentence, queries["block_m"],
                         queries["block_n"])
    profiles = []
    for launch in _launched(args, tiles):
      counted = _profile_launch(args, launch, tiles, trips)
      profiles.append(counted)
      if args.output_jsonl:
        with open(args.output_jsonl, "a") as f:
          f.write(json.dumps(_floor_record(args, launch, counted),
                             sort_keys=True) + "\n")
  except UsageError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print("\n".join(report(profiles, args.sms, args.clock_ghz,
                         args.top_lines)))
  return 0

if __name__ == "__main__":
  sys.exit(main())
