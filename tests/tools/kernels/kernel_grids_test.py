"""Tests for tools/kernels/kernel_grids.py: the kernels' loops counted by hand
on a small shape, the tiles read from the kernel module's source, and the
command line."""

from tools.kernels import kernel_grids

SMALL_TILES = {kernel: dict(block_m=4, block_n=4, num_warps=4, num_stages=2)
               for kernel in ("branch_forward", "branch_backward_queries",
                              "branch_backward_keys")}


def test_loops_counted_by_hand():
  # Blocks of b = 5, N = 10 (two blocks), G = 3, tiles of 4 x 4, one head.
  launches = {g.name: g.loops for g in kernel_grids.grids(
      1, 1, long_len=10, global_len=3, local_radius=4,
      kernel_tiles=SMALL_TILES)}
  # Rows 0-3: blocks 0's band, 15 rows (4 tiles); rows 4-7 straddle
  # blocks 0 and 1 (20 rows, 5); rows 8-9: block 1's band (4); plus one
  # tile of the 3 global keys each.
  assert launches["long branch, forward"] == [5, 6, 5]
  # Padded key row p lies in the bands of query blocks p // 5 - 2 .. p // 5:
  # key rows 0-3 in block 0's (rows 0-4: 2 tiles); 4-7, 8-11 and 12-15 in
  # blocks 0 and 1's (3 tiles); 16-19 in block 1's (rows 5-9: 2).
  assert launches["long branch, backward keys, l2l band"] == [2, 3, 3, 3, 2]
  # 3 global keys over all 10 queries: one key tile, 3 query tiles.
  assert launches["long branch, backward keys, l2g (3 keys over 10 "
                  "queries)"] == [3]
  # One tile of 3 global queries over 3 global and 10 long keys.
  assert launches["global branch, forward"] == [1 + 3]
  assert launches["global branch, backward keys, g2l"] == [1, 1, 1]


def test_band_key_rows_start_even():
  # The kernels hash dropout by pairs of keys, so a tile's keys start even:
  # block 1 of b = 5 starts at key row 5, its tile at 4.
  assert kernel_grids.band_key_rows(8, 10, 5, 4) == (4, 20)
  assert kernel_grids.band_key_rows(4, 10, 5, 4) == (0, 20)
  assert kernel_grids.band_key_rows(12, 20, 6, 4) == (12, 30)


def test_each_loops_tiles():
  launches = {g.name: g for g in kernel_grids.grids(
      1, 1, long_len=10, global_len=3, local_radius=4,
      kernel_tiles=SMALL_TILES)}
  # The band's loop, then the global keys' (as above).
  forward = launches["long branch, forward"]
  assert forward.parts == [(4, 1), (5, 1), (4, 1)]
  assert forward.loop_tiles() == (13, 3)
  assert launches["global branch, backward queries"].loop_tiles() == (1, 3)
  # One loop: all its tiles.
  assert launches["long branch, backward keys, l2l band"].loop_tiles() == (13,)
  # Each launch names its kernel, branch and (keys) pattern.
  assert [(g.kernel, g.branch, g.pattern) for g in launches.values()] == [
      ("branch_forward", "long", 0), ("branch_backward_queries", "long", 0),
      ("branch_backward_keys", "long", 1), ("branch_backward_keys", "long", 2),
      ("branch_forward", "global", 0), ("branch_backward_queries", "global", 0),
      ("branch_backward_keys", "global", 1),
      ("branch_backward_keys", "global", 2)]


def test_rounds_of_equal_and_unequal_loops():
  equal = kernel_grids.Grid("equal", [7] * 5)
  assert equal.rounds(resident=2) == 3 * 7 and equal.balanced(2) == 18
  unequal = kernel_grids.Grid("unequal", [9, 1, 1, 1])
  assert unequal.rounds(resident=2) == 9 and unequal.balanced(2) == 6


def test_tiles_are_read_without_importing_triton(tmp_path):
  source = tmp_path / "kernels.py"
  source.write_text("import triton\nTILES = {\n"
                    "    'branch_forward': dict(block_m=16, block_n=32,\n"
                    "                         num_warps=4, num_stages=3),\n}\n")
  assert kernel_grids.tiles(source) == {"branch_forward": dict(
      block_m=16, block_n=32, num_warps=4, num_stages=3)}
  real = kernel_grids.tiles()
  assert set(real) == set(SMALL_TILES)
  assert all(t["block_m"] >= 16 and t["block_n"] >= 16
             for t in real.values())


def test_command_line_prints_the_table(capsys):
  assert kernel_grids.main(["--batch_size=1", "--num_heads=2"]) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[0].startswith("| kernel | programs | longest loop |")
  assert len(out) == 2 + 8 + 1
  assert out[-1].startswith("backward: ")
  assert kernel_grids.main(["--resident=0"]) == 2


def test_the_global_branch_reads_the_unpadded_long_keys():
  # L = 12 pads to N = 14 on the band (blocks of b = 7); the global
  # branch's g2l keys are the L = 12 long tokens (`attention.core`'s
  # layouts): three key tiles of 4, where N's would be four.
  launches = {g.name: g for g in kernel_grids.grids(
      1, 1, long_len=12, global_len=3, local_radius=6,
      kernel_tiles=SMALL_TILES)}
  # Four tiles of N's rows on the long branch ...
  assert launches["long branch, forward"].programs == 4
  # ... three of L's keys on the global branch.
  assert launches["global branch, forward"].parts == [(1, 3)]
  assert launches["global branch, backward keys, g2l"].loops == [1, 1, 1]
