"""Tests for tools/kernels/kernel_sass.py: a listing's loops and counts by hand;
the per-id loop's trips against the ids ETC's side inputs give; a compiled
backward cubin's loops."""

import importlib.util
import json
import math
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tools.bench import benchmark_worker
from tools.kernels import kernel_grids
from tools.kernels import kernel_sass

REPO = kernel_grids.ROOT

# Two loops, one inside the other, source lines, predicated branches, and
# the branch-to-itself that pads a kernel's end.
LISTING = """
\t.section\t.text.branch_forward,"ax",@progbits
branch_forward:
\t//## File "k.py", line 10
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
.L_x_0:
\t//## File "k.py", line 20
        /*0020*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0030*/                   FFMA R1, R2, R3, R1 ;
.L_x_1:
\t//## File "k.py", line 30
        /*0040*/                   LDG.E.U8 R5, desc[UR4][R2.64] ;
        /*0050*/               @!P0 BRA `(.L_x_1) ;
\t//## File "k.py", line 20
        /*0060*/                   MUFU.EX2 R6, R6 ;
        /*0070*/                @P1 BRA `(.L_x_0) ;
\t//## File "k.py", line 40
        /*0080*/                   STG.E desc[UR4][R2.64], R1 ;
        /*0090*/                   EXIT ;
.L_x_2:
        /*00a0*/                   BRA `(.L_x_2);
"""


# An opcode of each class, by its first word.
CLASSES = {"HMMA.16816.F32.BF16": "tensor", "IMAD.WIDE.U32": "int",
           "VIADD": "int", "LDG.E.U8": "global", "LDSM.16.M88.4": "shared",
           "MUFU.EX2": "special", "F2FP.BF16.F32.PACK_AB": "convert",
           "STL.64": "local", "SHFL.BFLY": "shuffle", "WHATEVER": "other"}


def test_classes():
  assert {op: kernel_sass.op_class(op) for op in CLASSES} == CLASSES


def test_listing_loops_and_counts_by_hand():
  sass = kernel_sass.parse(LISTING)
  assert [i.opcode.split(".")[0] for i in sass.instructions] == [
      "MOV", "S2R", "HMMA", "FFMA", "LDG", "BRA", "MUFU", "BRA", "STG",
      "EXIT", "BRA"]
  assert [i.line for i in sass.instructions] == [10, 10, 20, 20, 30, 30, 20,
                                                 20, 40, 40, 40]
  found = kernel_sass.loops(sass)  # not the end's branch to itself
  assert found == [kernel_sass.Loop(2, 7), kernel_sass.Loop(4, 5)]
  assert kernel_sass.outer_loops(found) == [kernel_sass.Loop(2, 7)]
  # 3 programs of 2 warps; 5 tiles in all, the inner loop 7 trips in all.
  p = kernel_sass.profile(sass, "k", warps=2, programs=3, loop_tiles=(5,),
                          inner=[[("ids", 7)]])
  assert sum(p.per_tile[0].values()) == 4 and p.inner == [[("ids", 2, 7)]]
  assert dict(p.issued) == {
      "int": 6,  # MOV: once per program
      "control": 6 + 6 + 6 + 10 + 14,  # S2R, EXIT, pad; both branches
      "tensor": 10, "fp32": 10, "special": 10,
      "global": 14 + 6}
  assert p.inner_issued == {"ids": 28}
  assert dict(p.lines) == {("k.py", 10): 12, ("k.py", 20): 40,
                           ("k.py", 30): 28, ("k.py", 40): 18}
  lines = kernel_sass.report([p], sms=1, clock_ghz=1.0, top_lines=2)
  assert lines[2].startswith("| k | 4 (+ 2 x 1.4 ids) | 0.0 | 0.000 | 29% |")
  assert lines[-3:] == ["k: the busiest source lines",
                        "  40.8%  k.py:20: ?", "  28.6%  k.py:30: ?"]
  # 98 warp instructions on 1 SM issuing 4 a cycle at 1 GHz.
  assert p.floor_ms(sms=1, clock_ghz=1.0) == pytest.approx(98 / 4 / 1e6)
  with pytest.raises(ValueError, match="1 loops in the code, 2 in the grid"):
    kernel_sass.profile(sass, "k", 2, 3, (5, 5))
  with pytest.raises(ValueError, match="1 loops inside a loop of the code, "
                     "0 expected"):
    kernel_sass.profile(sass, "k", 2, 3, (5,))


def test_inner_loops_of_each_kernel():
  grids = kernel_grids.grids(1, 2, long_len=60, global_len=8,
                             local_radius=4)
  trips = {"long": (30, 8), "global": (6, 9)}

  def inner(streams, kernel_name, branch="long"):
    (launch,) = [l for l in kernel_sass.launches(
        grids, "bfloat16", 16, 8, streams, True)
                 if l.variant.kernel == kernel_name and l.branch == branch and
                 l.variant.pattern in (0, 1)]
    return launch.grid.loop_tiles(), kernel_sass.inner_loops_of(
        launch, trips, heads=2, num_sources=3)

  # Summed streams: only the backward queries kernel's per-id sums.
  assert inner("1111", "branch_forward")[1] == [[], []]
  assert inner("1111", "branch_backward_queries")[1] == [
      [("ids", 60)], [("ids", 16)]]
  # Recomputed: the sources' products first, a trip per layer and tile.
  tiles, loops = inner("ss00", "branch_backward_queries", "global")
  assert loops == [[("sources", 3 * tiles[0]), ("ids", 12)],
                   [("sources", 3 * tiles[1]), ("ids", 18)]]
  tiles, loops = inner("s000", "branch_backward_keys")
  assert loops == [[("sources", 3 * tiles[0])]]


def test_resident_warps():
  # The forward's 191 registers: 2 programs of 4 warps (6144 a warp).
  assert kernel_sass.resident_warps(191, 36896, 4) == 8
  # Shared memory bounds it: 227 KiB over 100 KB is 2 programs.
  assert kernel_sass.resident_warps(64, 100_000, 4) == 8
  # Small programs: the 64 warps of the multiprocessor.
  assert kernel_sass.resident_warps(32, 0, 4) == 64


def test_distance_ids_are_etcs():
  m = 2
  assert [kernel_sass.distance_id(d, m) for d in range(-4, 5)] == [
      4, 4, 4, 3, 0, 1, 2, 2, 2]


def _trips(ids, rows, keys, block_m, block_n, cell_id):
  """Brute force: per tile, the largest id its cells hold less the
  smallest, plus one; `cell_id(i, k)` is None outside the pattern."""
  total = 0
  for m0 in range(0, rows, block_m):
    for n0 in keys(m0):
      held = [cell_id(i, k) for i in range(m0, min(m0 + block_m, rows))
              for k in range(n0, n0 + block_n)]
      held = [x for x in held if x is not None]
      if held:
        total += max(held) - min(held) + 1
  return total


@pytest.mark.parametrize("block_m,block_n", [(4, 4), (8, 16), (16, 8)])
def test_per_id_trips_are_those_of_etcs_side_inputs(block_m, block_n):
  from etc_realformer.features.side_inputs import make_global_local_side_inputs
  radius, rmax, tps, long_len, global_len = 4, 2, 8, 60, 8
  b = radius + 1
  x = benchmark_worker.global_local_inputs(long_len, global_len, 1, 100, 16,
                                           tps, 0.0, 0)
  branch = {k: np.asarray(v)[0] for k, v in make_global_local_side_inputs(
      x["long_breakpoints"], x["global_breakpoints"], x["sentence_ids"],
      radius, rmax).items()}
  l2l, l2g = branch["l2l_relative_att_ids"], branch["l2g_relative_att_ids"]
  g2g, g2l = branch["g2g_relative_att_ids"], branch["g2l_relative_att_ids"]

  def band_keys(m0):
    start, stop = kernel_grids.band_key_rows(m0, long_len, b, block_m)
    return range(start, stop, block_n)

  def band_id(i, k):  # padded key row k: the window's column k - i - 1
    w = k - i - 1
    return l2l[i, w] if 0 <= w < 2 * b - 1 else None

  def dense(ids, keys):
    return lambda i, k: ids[i, k] if k < keys else None

  expected = {
      "long": (_trips(l2l, long_len, band_keys, block_m, block_n, band_id),
               _trips(l2g, long_len, lambda m0: range(0, global_len,
                                                      block_n),
                      block_m, block_n, dense(l2g, global_len))),
      "global": (_trips(g2g, global_len, lambda m0: range(0, global_len,
                                                          block_n),
                        block_m, block_n, dense(g2g, global_len)),
                 _trips(g2l, global_len, lambda m0: range(0, long_len,
                                                          block_n),
                        block_m, block_n, dense(g2l, long_len)))}
  assert kernel_sass.per_id_trips(long_len, global_len, radius, rmax, tps,
                                  block_m, block_n) == expected
  # Tiles that straddle the query (own-distance) column hold ids from
  # both branches of it: more trips than the tiles.
  assert expected["long"][0] > math.ceil(long_len / block_m)


def test_bad_flags_and_a_missing_cubin_are_one_line(tmp_path, capsys):
  assert kernel_sass.main([f"--cubin_dir={tmp_path}", "--sms=0"]) == 2
  assert "--sms must be at least 1" in capsys.readouterr().err
  assert kernel_sass.main([f"--cubin_dir={tmp_path}", "--streams=11"]) == 2
  assert kernel_sass.main([f"--cubin_dir={tmp_path}"]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].startswith("error: ") and "branch_forward_bfloat16_d64_r32_" \
      "band_f32_1111_drop_rows.cubin: no such cubin" in err[-1]


def test_no_disassembler_is_one_line(tmp_path, capsys, monkeypatch):
  # The cubin is there (its bytes do not matter: nvdisasm is missing).
  (tmp_path / "branch_forward_bfloat16_d64_r32_band_f32_1111_drop_rows.cubin"
   ).write_bytes(b"\x7fELF")
  monkeypatch.setenv("NVDISASM", str(tmp_path / "no-nvdisasm"))
  assert kernel_sass.main([f"--cubin_dir={tmp_path}"]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: ") and \
      "no-nvdisasm" in err[0]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                    reason="needs Triton")
def test_compiled_cubins_loops_and_a_layers_floors(tmp_path, capsys):
  # Both branches, both passes, R = 8, with source lines.
  result = subprocess.run(
      [sys.executable, "-m", "tools.kernels.build_kernels",
       f"--output_dir={tmp_path}", "--no_library", "--dtypes=bfloat16", "--head_sizes=16",
       "--relative_vocab_sizes=8", "--streams=1111", "--dropout=rows",
       "--line_info", "--arch=90", "--jobs=2"],
      cwd=REPO, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  source = kernel_grids.KERNELS.read_text().splitlines()
  id_sum_line = 1 + next(i for i, line in enumerate(source)
                         if "col = tl.sum(tl.where(has & (rel_id" in line)
  queries = kernel_sass.disassemble(str(
      tmp_path / "cubins" /
      "branch_backward_queries_bfloat16_d16_r8_band_f32_1111_drop_rows.cubin"))
  found = kernel_sass.loops(queries)
  outer = kernel_sass.outer_loops(found)
  # A loop per pattern, each holding the per-id sums' loop.
  assert len(outer) == 2
  for loop in outer:
    inner = kernel_sass.inner_loops(found, loop)
    assert len(inner) == 1
    lines = {(pathlib.Path(queries.instructions[i].file).name,
              queries.instructions[i].line)
             for i in range(inner[0].start, inner[0].end + 1)}
    assert ("triton_attention.py", id_sum_line) in lines
  keys = kernel_sass.disassemble(str(
      tmp_path / "cubins" /
      "branch_backward_keys_bfloat16_d16_r8_band_p1_f32_11_drop_rows.cubin"))
  assert len(kernel_sass.loops(keys)) == 1
  assert 0 < kernel_sass.registers(str(
      tmp_path / "cubins" /
      "branch_backward_keys_bfloat16_d16_r8_band_p1_f32_11_drop_rows.cubin"
  )) <= 255
  p = kernel_sass.profile(queries, "queries", warps=4, programs=10,
                          loop_tiles=(30, 20),
                          inner=[[("ids", 90)], [("ids", 20)]])
  assert p.issued["tensor"] > 0 and p.issued["global"] > 0
  assert 0 < p.inner_issued["ids"] < sum(p.issued.values())

  # A layer of a small model: a row per launch, and a floor record each.
  floors = tmp_path / "floors.jsonl"
  assert kernel_sass.main([
      f"--cubin_dir={tmp_path / 'cubins'}", "--batch_size=1",
      "--num_heads=2", "--long_len=500", "--global_len=32",
      "--local_radius=9", "--relative_max_distance=2", "--head_size=16",
      "--relative_vocab_size=8", "--top_lines=2",
      f"--output_jsonl={floors}"]) == 0
  out = capsys.readouterr().out.splitlines()
  rows = [line for line in out[2:] if line.startswith("| ")]
  assert len(rows) == 8 and out[10].startswith("one layer, both branches")
  # The backward queries kernels' per-id sums have a share.
  assert all(row.split(" | ")[4].endswith("%") ==
             ("backward queries" in row)
             for row in rows)
  assert "long branch, forward: the busiest source lines" in out
  records = [json.loads(line) for line in floors.read_text().splitlines()]
  assert [r["variant"] for r in records][:3] == [
      "branch_forward_bfloat16_d16_r8_band_f32_1111_drop_rows",
      "branch_backward_queries_bfloat16_d16_r8_band_f32_1111_drop_rows",
      "branch_backward_keys_bfloat16_d16_r8_band_p1_f32_11_drop_rows"]
  assert all(r["floor_ms"] > 0 and r["resident_warps"] >= 4 and
             r["long_len"] == 500 for r in records)

  # A build aligned for the shape's lengths (here G = 32 only, on the
  # long branch): its cubin is the one counted, as a handler launches it.
  plain = tmp_path / "cubins" / records[0]["variant"]
  for suffix in (".cubin", ".meta"):
    shutil.copy(str(plain) + suffix, str(plain) + "_a0010" + suffix)
  floors.unlink()
  assert kernel_sass.main([
      f"--cubin_dir={tmp_path / 'cubins'}", "--batch_size=1",
      "--num_heads=2", "--long_len=500", "--global_len=32",
      "--local_radius=9", "--relative_max_distance=2", "--head_size=16",
      "--relative_vocab_size=8", "--top_lines=0",
      f"--output_jsonl={floors}"]) == 0
  aligned = [json.loads(line)["variant"]
             for line in floors.read_text().splitlines()]
  assert aligned[0] == records[0]["variant"] + "_a0010"
  assert aligned[1:] == [r["variant"] for r in records][1:]
