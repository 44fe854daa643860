"""Tests for tools/build_kernels.py: the FFI library and Triton's cubins,
compiled ahead of time without a GPU (in a child process: Triton cannot
load where TensorFlow is)."""

import json
import os
import subprocess
import sys

import pytest

from tools import build_kernels

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def test_variant_names_are_the_handlers():
  # attention_ffi.cc builds the same names from the call's operands.
  assert build_kernels.variant_name("long_side_forward", "bfloat16", 64,
                                    32) == "long_side_forward_bfloat16_d64_r32"
  assert build_kernels.variant_name("long_side_forward", "float32", 64,
                                    0) == "long_side_forward_float32_d64_noids"


def test_finds_tensorflows_ffi_headers_without_importing_it():
  # (The library's build itself: ffi_library, through the fused tests.)
  include = build_kernels.default_ffi_include()
  assert include and os.path.exists(
      os.path.join(include, "xla", "ffi", "api", "ffi.h"))


@pytest.mark.slow
@pytest.mark.skipif(any(__import__("importlib").util.find_spec(m) is None
                        for m in ("triton",)), reason="needs Triton")
def test_cubins_compile_for_hopper_without_a_gpu(tmp_path):
  result = subprocess.run(
      [sys.executable, "-m", "tools.build_kernels", f"--output_dir={tmp_path}",
       "--no_library", "--dtypes=float16", "--head_sizes=16",
       "--relative_vocab_sizes=5", "--arch=90"],
      cwd=REPO, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  folder = tmp_path / "cubins"
  names = sorted(p.stem for p in folder.glob("*.cubin"))
  assert names == ["long_side_forward_float16_d16_noids",
                   "long_side_forward_float16_d16_r8"]
  for name in names:
    function, shared, warps, block_m = (folder / f"{name}.meta").read_text(
    ).split()
    assert function == "long_side_forward"
    assert int(shared) > 0 and int(warps) == 4 and int(block_m) == 64
    assert (folder / f"{name}.cubin").read_bytes()[:4] == b"\x7fELF"
  manifest = json.loads((folder / "manifest.json").read_text())
  assert manifest["arch"] == 90 and len(manifest["kernels"]) == 2
