"""Tests for tools/kernels/build_kernels.py: its flags, and the FFI library
and Triton's cubins compiled ahead of time without a GPU (in a child
process: Triton cannot load where TensorFlow is)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tools.kernels import build_kernels
from tools.kernels import kernel_sass

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def test_bad_flag_values_are_one_line(capsys, tmp_path):
  assert build_kernels.main([f"--output_dir={tmp_path}", "--branches=sparse",
                             "--no_library", "--no_cubins"]) == 2
  assert "--branches ['sparse']" in capsys.readouterr().err
  assert build_kernels.main([f"--output_dir={tmp_path}", "--passes=grad",
                             "--no_library", "--no_cubins"]) == 2
  assert "--passes ['grad']" in capsys.readouterr().err


NEEDS_TRITON = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="needs Triton")

def _build(tmp_path, *flags: str, jobs: int = 2):
  """`tools.kernels.build_kernels`' cubins for Hopper (no library) into
  tmp_path, in a child process; their folder."""
  result = subprocess.run(
      [sys.executable, "-m", "tools.kernels.build_kernels",
       f"--output_dir={tmp_path}", "--no_library", "--arch=90", f"--jobs={jobs}", *flags],
      cwd=REPO, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  return tmp_path / "cubins"


@pytest.mark.slow
@NEEDS_TRITON
def test_cubins_compile_for_hopper_without_a_gpu(tmp_path):
  folder = _build(tmp_path, "--dtypes=float16", "--head_sizes=16",
                  "--relative_vocab_sizes=5", "--streams=1111",
                  "--stream_dtypes=low", "--dropout=rows",
                  "--passes=fwd")
  names = sorted(p.stem for p in folder.glob("*.cubin"))
  assert names == ["branch_forward_float16_d16_r8_band_low_1111_drop_rows",
                   "branch_forward_float16_d16_r8_dense_low_1111_drop_rows"]
  for name in names:
    function, shared, warps, block_m = (folder / f"{name}.meta").read_text(
    ).split()
    assert function == "branch_forward"
    assert int(shared) > 0 and int(warps) == 4 and int(block_m) == 32
    assert (folder / f"{name}.cubin").read_bytes()[:4] == b"\x7fELF"
  manifest = json.loads((folder / "manifest.json").read_text())
  assert manifest["arch"] == 90 and len(manifest["kernels"]) == 2
  assert {k["band"] for k in manifest["kernels"]} == {True, False}


@NEEDS_TRITON
def test_backward_cubins_compile_for_hopper_without_a_gpu(tmp_path):
  # The band branch's three kernels, a small R; a key tile other than the
  # query tile, which the keys kernel's metadata holds.
  folder = _build(tmp_path, "--passes=bwd", "--dtypes=bfloat16",
                  "--head_sizes=16", "--relative_vocab_sizes=8",
                  "--branches=band", "--streams=0011", "--dropout=rows",
                  "--block_n=16")
  tiles = {}
  for path in folder.glob("*.meta"):
    function, shared, warps, tile = path.read_text().split()
    assert path.stem.startswith(function)
    assert int(shared) > 0 and int(warps) == 4
    tiles[path.stem] = int(tile)
    assert (folder / f"{path.stem}.cubin").read_bytes()[:4] == b"\x7fELF"
  # The queries kernel's own block_m; block_n from the flag, for both.
  assert tiles == {
      "branch_backward_queries_bfloat16_d16_r8_band_f32_0011_drop_rows": 32,
      "branch_backward_keys_bfloat16_d16_r8_band_p1_f32_01_drop_rows": 16,
      "branch_backward_keys_bfloat16_d16_r8_band_p2_f32_01_drop_rows": 16}
  manifest = json.loads((folder / "manifest.json").read_text())
  assert manifest["tiles"]["branch_backward_keys"]["block_n"] == 16
  assert manifest["tiles"]["branch_backward_queries"]["block_n"] == 16
  assert {(k["kernel"], k["pattern"]) for k in manifest["kernels"]} == {
      ("branch_backward_queries", 0), ("branch_backward_keys", 1),
      ("branch_backward_keys", 2)}


@NEEDS_TRITON
def test_register_cap_reaches_the_cubin(tmp_path):
  folder = _build(tmp_path, "--passes=fwd", "--dtypes=float16",
                  "--head_sizes=16", "--relative_vocab_sizes=0",
                  "--branches=dense", "--streams=0000", "--dropout=off",
                  "--maxnreg=64", jobs=1)
  (cubin,) = folder.glob("*.cubin")
  assert kernel_sass.registers(str(cubin)) <= 64
  manifest = json.loads((folder / "manifest.json").read_text())
  assert all(shape["maxnreg"] == 64 for shape in manifest["tiles"].values())


@NEEDS_TRITON
def test_aligned_lengths_widen_the_loads(tmp_path):
  # The global branch of L = 64, G = 32 (r = 3): its rows and both
  # patterns' keys are multiples of 16, so `--aligned_for` adds a dense
  # cubin that takes them as such (and the full path's long branch, 64 over
  # 64 and 32, the same digits); the running sums' loads and stores along
  # their rows then move several elements an instruction.
  folder = _build(tmp_path, "--passes=fwd", "--dtypes=float16",
                  "--head_sizes=16", "--relative_vocab_sizes=0",
                  "--branches=dense", "--streams=1111", "--dropout=off",
                  "--aligned_for=64:32:3")
  plain = "branch_forward_float16_d16_noids_dense_f32_1111_nodrop_rows"
  assert sorted(p.stem for p in folder.glob("*.cubin")) == [
      plain, plain + "_a1110"]

  def global_memory(name):
    sass = kernel_sass.disassemble(str(folder / f"{name}.cubin"))
    return [i.opcode for i in sass.instructions
            if kernel_sass.op_class(i.opcode) == "global"]

  wide = [op for op in global_memory(plain + "_a1110")
          if ".64" in op or ".128" in op]
  assert wide and len(global_memory(plain + "_a1110")) < len(
      global_memory(plain))
  assert build_kernels.main([f"--output_dir={tmp_path}", "--no_library",
                             "--aligned_for=64:32"]) == 2
