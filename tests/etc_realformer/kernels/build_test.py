"""Tests for etc_realformer/kernels/build.py: the variants a build
compiles and each kernel's constexprs (the cubins themselves: through
tools/kernels/build_kernels.py, in a child process)."""

import dataclasses
import os

from etc_realformer.kernels import build


def test_default_variants_are_a_12_layer_models():
  forward = build.default_variants(["bfloat16"], [64], [32],
                                   passes=("fwd",))
  names = [v.name for v in forward]
  assert len(names) == len(set(names)) == 2 * 5 * 2  # branches, streams, drop
  assert "branch_forward_bfloat16_d64_r32_dense_f32_1100_nodrop_rows" in names
  assert "branch_forward_bfloat16_d64_r32_band_f32_0011_drop_rows" in names
  # Recomputed streams: the sums made from the sources.
  assert "branch_forward_bfloat16_d64_r32_band_f32_ss00_drop_rows" in names
  # Float32 inputs: streams in the inputs' dtype are the float32 kernels.
  both = build.default_variants(["float32"], [64], [32],
                                stream_dtypes=("f32", "low"),
                                passes=("fwd",))
  assert len(both) == 20
  # Training's by default: the backward's queries kernel per forward
  # variant, and its keys kernels per branch, pattern, the pattern's flags
  # (00, 01, 11, 10, s0 of the five stream sets) and dropout.
  variants = build.default_variants(["bfloat16"], [64], [32])
  assert [v.name for v in variants[:20]] == names
  kernels = [v.kernel for v in variants]
  assert kernels.count("branch_backward_queries") == 20
  assert kernels.count("branch_backward_keys") == 2 * 2 * 5 * 2
  assert len(variants) == len({v.name for v in variants}) == 80
  names = {v.name for v in variants}
  assert ("branch_backward_queries_bfloat16_d64_r32_band_f32_1111_drop_rows"
          in names)
  assert ("branch_backward_keys_bfloat16_d64_r32_band_p2_f32_01_nodrop_rows"
          in names)
  keys = [v for v in variants if v.name == (
      "branch_backward_keys_bfloat16_d64_r32_band_p2_f32_01_nodrop_rows")][0]
  assert keys.pattern == 2 and keys.flags == (False, True)
  sourced = [v for v in variants if v.name == (
      "branch_backward_keys_bfloat16_d64_r32_band_p1_f32_s0_drop_rows")][0]
  assert sourced.flags == (True, False) and sourced.sources
  assert build.constexprs(sourced, {"block_m": 32, "block_n": 32})[
      "SOURCES"]
  # The slow ones (per-id sums unrolled over R) compile first.
  assert max(variants, key=lambda v: v.cost).kernel == "branch_backward_queries"


def test_keys_kernel_constexprs_name_its_pattern():
  tiles = {"block_m": 64, "block_n": 32}
  second = build.Variant("float32", 64, 32, True, "10",
                         dropout=True, kernel="branch_backward_keys",
                         pattern=2)
  assert build.constexprs(second, tiles) == {
      "D": 64, "BM": 64, "BN": 32, "R": 32, "BAND": False, "HAS_IDS": True,
      "READ": True, "WRITE": False, "SOURCES": False, "DROPOUT": True,
      "BY_ROWS": True, "IEEE": True, "PATTERN": 1, "BAND_BRANCH": True}
  first = dataclasses.replace(second, pattern=1)
  assert build.constexprs(first, tiles)["BAND"]
  assert build.constexprs(first, tiles)["PATTERN"] == 0
  assert second.tile == "block_n" and first.tile == "block_n"
  queries = dataclasses.replace(second, streams="1100", pattern=0,
                                kernel="branch_backward_queries")
  assert queries.tile == "block_m"
  assert list(build.constexprs(queries, tiles)) == list(
      build.BRANCH_CONSTEXPRS)


def test_finds_tensorflows_ffi_headers_without_importing_it():
  # (The library's build itself: ffi_library, through the fused tests.)
  include = build.default_ffi_include()
  assert include and os.path.exists(
      os.path.join(include, "xla", "ffi", "api", "ffi.h"))
