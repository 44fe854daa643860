r"""The fused kernels' grids at a shape: programs and loop lengths.

    python -m tools.kernels.kernel_grids [--batch_size=4] [--num_heads=12] \
        [--long_len=4096] [--global_len=256] [--local_radius=84] \
        [--resident=264]

Counted from the kernels' loops (`etc_realformer/kernels/triton_attention.py`,
with its `TILES`): per kernel of each branch, the programs it launches, the
tiles the longest program's loop visits, the tiles of all programs, and,
with `resident` programs running at once (default: two per
multiprocessor on 132), the rounds of tiles it takes: a grid of equal
loops runs in whole waves, ceil(programs / resident) x loop; unequal
loops at best max(longest, ceil(all / resident)). Beside it the rounds a
perfectly balanced grid would take, ceil(all / resident). A short grid
(fewer programs than the card holds) with long loops takes its loop's
length however fast each tile is (docs/kernel_bounds.md, "Bytes, products
and tiles").
No GPU, Triton or TensorFlow needed: the tiles are read from the kernel
module's source.
"""

import argparse
import ast
import dataclasses
import math
import pathlib
import sys
from typing import Dict, List, Optional, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNELS = ROOT / "etc_realformer" / "kernels" / "triton_attention.py"


def tiles(path: pathlib.Path = KERNELS) -> Dict[str, Dict[str, int]]:
  """`triton_attention.TILES`, read from the source (importing the module
  needs Triton)."""
  for node in ast.parse(path.read_text()).body:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and
        getattr(node.targets[0], "id", None) == "TILES"):
      return {kernel: {k.arg: ast.literal_eval(k.value)
                       for k in call.keywords}
              for kernel, call in zip(
                  (ast.literal_eval(key) for key in node.value.keys),
                  node.value.values)}
  raise ValueError(f"no TILES in {path}")


@dataclasses.dataclass(frozen=True)
class Grid:
  """One launch: its name, each program's loop length in tiles, and (where
  a program runs two loops, one per pattern) each loop's share of it, in
  source order; the kernel (`TILES`' key), its branch ("long", "global")
  and, for the keys kernel, its pattern (1, 2; else 0)."""
  name: str
  loops: List[int]
  parts: Optional[List[Tuple[int, ...]]] = None
  kernel: str = ""
  branch: str = ""
  pattern: int = 0

  def loop_tiles(self) -> Tuple[int, ...]:
    """The tiles of all programs, per loop of the kernel's source."""
    if self.parts is None:
      return (sum(self.loops),)
    return tuple(sum(column) for column in zip(*self.parts))

  @property
  def programs(self) -> int:
    return len(self.loops)

  def rounds(self, resident: int) -> int:
    if len(set(self.loops)) == 1:
      return math.ceil(self.programs / resident) * self.loops[0]
    return max(max(self.loops), math.ceil(sum(self.loops) / resident))

  def balanced(self, resident: int) -> int:
    return math.ceil(sum(self.loops) / resident)


def band_key_rows(m0: int, rows: int, block_len: int,
                  block_m: int) -> Tuple[int, int]:
  """The padded key rows [start, stop) the query tile at row m0 visits
  (`_first_keys`: from its first row's block, down to an even row, to
  three blocks past its last row's)."""
  last = min(m0 + block_m, rows) - 1
  start = (m0 // block_len) * block_len
  return start - start % 2, (last // block_len) * block_len + 3 * block_len


def _band_queries(rows: int, block_len: int, second: int, block_m: int,
                  block_n: int) -> List[Tuple[int, int]]:
  """Each query tile's loops: over the band, and over the global keys."""
  parts = []
  for m0 in range(0, rows, block_m):
    start, stop = band_key_rows(m0, rows, block_len, block_m)
    parts.append((math.ceil((stop - start) / block_n),
                  math.ceil(second / block_n)))
  return parts


def _band_keys(rows: int, block_len: int, block_m: int,
               block_n: int) -> List[int]:
  """A band key tile's loop over the query blocks that see its rows
  (`branch_backward_keys`: blocks p // b - 2 .. p // b of key row p)."""
  loops = []
  key_rows = rows + 2 * block_len
  for n0 in range(0, key_rows, block_n):
    last = min(n0 + block_n, key_rows) - 1
    start = max(n0 // block_len - 2, 0) * block_len
    stop = min((last // block_len + 1) * block_len, rows)
    loops.append(max(0, math.ceil((stop - start) / block_m)))
  return loops


def branch_lengths(long_len: int, global_len: int, local_radius: int
                   ) -> List[Tuple[bool, int, int, int, int]]:
  """The kernels' lengths of each branch at a shape: (band, query rows,
  the first and second patterns' key rows, block length) of the long
  branch (the band: N = L padded to whole blocks of b = r + 1, N + 2b
  padded key rows, G), the global branch (G over G and the L long keys,
  unpadded: `attention.core`'s layouts), and the full path's long branch
  (L over L and G)."""
  b = local_radius + 1
  n = math.ceil(long_len / b) * b
  return [(True, n, n + 2 * b, global_len, b),
          (False, global_len, global_len, long_len, 1),
          (False, long_len, long_len, global_len, 1)]


def grids(batch_size: int, num_heads: int, long_len: int, global_len: int,
          local_radius: int,
          kernel_tiles: Optional[Dict[str, Dict[str, int]]] = None
          ) -> List[Grid]:
  """Every launch of one layer's two branches, forward and backward."""
  t = kernel_tiles or tiles()
  fwd, queries, keys = (t["branch_forward"], t["branch_backward_queries"],
                        t["branch_backward_keys"])
  (_, n, _, _, b), _, _ = branch_lengths(long_len, global_len, local_radius)
  g = global_len
  heads = batch_size * num_heads

  def per_head(loops: List[int]) -> List[int]:
    return loops * heads

  def two_loops(name: str, kernel: str, branch: str,
                parts: List[Tuple[int, int]]) -> Grid:
    return Grid(name, per_head([sum(p) for p in parts]), parts * heads,
                kernel, branch)

  def keys_grid(name: str, branch: str, pattern: int, loops: List[int]
                ) -> Grid:
    return Grid(name, per_head(loops), None, "branch_backward_keys", branch,
                pattern)

  def dense(rows: int, first: int, second: int, tile
            ) -> List[Tuple[int, int]]:
    return [(math.ceil(first / tile["block_n"]),
             math.ceil(second / tile["block_n"]))] * math.ceil(
                 rows / tile["block_m"])

  def dense_keys(key_rows: int, rows: int) -> List[int]:
    return ([math.ceil(rows / keys["block_m"])] *
            math.ceil(key_rows / keys["block_n"]))

  return [
      two_loops("long branch, forward", "branch_forward", "long", _band_queries(
          n, b, g, fwd["block_m"], fwd["block_n"])),
      two_loops("long branch, backward queries", "branch_backward_queries",
                "long", _band_queries(n, b, g, queries["block_m"],
                                      queries["block_n"])),
      keys_grid("long branch, backward keys, l2l band", "long", 1, _band_keys(
          n, b, keys["block_m"], keys["block_n"])),
      keys_grid(f"long branch, backward keys, l2g ({g} keys over {n} "
                "queries)", "long", 2, dense_keys(g, n)),
      two_loops("global branch, forward", "branch_forward", "global",
                dense(g, g, long_len, fwd)),
      two_loops("global branch, backward queries", "branch_backward_queries",
                "global", dense(g, g, long_len, queries)),
      keys_grid("global branch, backward keys, g2g", "global", 1,
                dense_keys(g, g)),
      keys_grid("global branch, backward keys, g2l", "global", 2,
                dense_keys(long_len, g)),
  ]


def table(launches: List[Grid], resident: int) -> List[str]:
  """Markdown rows, then the backward's rounds against balanced ones."""
  lines = ["| kernel | programs | longest loop | all tiles | rounds | "
           "balanced |", "| --- | --- | --- | --- | --- | --- |"]
  for grid in launches:
    lines.append(f"| {grid.name} | {grid.programs} | {max(grid.loops)} | "
                 f"{sum(grid.loops)} | {grid.rounds(resident)} | "
                 f"{grid.balanced(resident)} |")
  backward = [grid for grid in launches if "backward" in grid.name]
  lines.append(
      f"backward: {sum(g.rounds(resident) for g in backward)} rounds of "
      f"tiles, {sum(g.balanced(resident) for g in backward)} balanced "
      f"({resident} programs at once)")
  return lines


# The benchmark's shape (docs/benchmarks.md, "GPU"), as flags.
SHAPE_FLAGS = {"batch_size": 4, "num_heads": 12, "long_len": 4096,
               "global_len": 256, "local_radius": 84}


def add_shape_flags(parser: argparse.ArgumentParser) -> None:
  """--batch_size, --num_heads, --long_len, --global_len, --local_radius
  (this tool's and `kernel_sass`'s), each at least 1."""
  for name, default in SHAPE_FLAGS.items():
    parser.add_argument(f"--{name}", type=int, default=default)


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  add_shape_flags(parser)
  parser.add_argument("--resident", type=int, default=264,
                      help="programs running at once (default: two per "
                      "multiprocessor on 132)")
  args = parser.parse_args(argv)
  for name in (*SHAPE_FLAGS, "resident"):
    if getattr(args, name) < 1:
      print(f"error: --{name} must be at least 1", file=sys.stderr)
      return 2
  launches = grids(args.batch_size, args.num_heads, args.long_len,
                   args.global_len, args.local_radius)
  print("\n".join(table(launches, args.resident)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
