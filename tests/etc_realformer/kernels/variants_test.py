"""Tests for etc_realformer/kernels/variants.py: the cubins' names, the
handlers' (`attention_ffi.cc`, `VariantName`) to the character."""

import os
import shutil
import subprocess

import pytest

from etc_realformer.kernels import build
from etc_realformer.kernels import variants

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def test_variant_names_are_the_handlers():
  # attention_ffi.cc (`VariantName`) builds the same names from the call.
  name = variants.variant_name
  assert name("bfloat16", 64, 32, True, "1111", False, True, True) == (
      "branch_forward_bfloat16_d64_r32_band_f32_1111_drop_rows")
  assert name("float16", 64, 0, False, "0011", True, True, False) == (
      "branch_forward_float16_d64_noids_dense_low_0011_drop_whole")
  # "low" only where a stream moves and the inputs are not float32;
  # "rows" whenever dropout is off.
  assert name("float16", 16, 8, True, "0000", True) == (
      "branch_forward_float16_d16_r8_band_f32_0000_nodrop_rows")
  assert name("float32", 64, 32, False, "1100", True, False, False) == (
      "branch_forward_float32_d64_r32_dense_f32_1100_nodrop_rows")
  with pytest.raises(ValueError, match="0/1 digits"):
    name("float32", 64, 32, True, "11")
  # Recomputed streams: "s" where a sum is read, made from the sources;
  # never written, never beside a "1".
  assert name("bfloat16", 64, 32, True, "ss00", False, True, True) == (
      "branch_forward_bfloat16_d64_r32_band_f32_ss00_drop_rows")
  for bad in ("ss11", "s100", "00s0"):
    with pytest.raises(ValueError, match="READ ones alone"):
      name("float32", 64, 32, True, bad)


def test_backward_variant_names():
  name = variants.variant_name
  # The queries kernel: the forward's name after its kernel's.
  assert name("bfloat16", 64, 32, True, "1111", False, True, True,
              "branch_backward_queries") == (
                  "branch_backward_queries_bfloat16_d64_r32_band_f32_1111_"
                  "drop_rows")
  # The keys kernel: the branch, the pattern and that pattern's two flags
  # ("low" only where they touch a stream).
  assert name("float16", 64, 0, True, "10", True, True, False,
              "branch_backward_keys", 2) == (
                  "branch_backward_keys_float16_d64_noids_band_p2_low_10_"
                  "drop_whole")
  assert name("float16", 64, 8, False, "00", True, False, False,
              "branch_backward_keys", 1) == (
                  "branch_backward_keys_float16_d64_r8_dense_p1_f32_00_"
                  "nodrop_rows")
  with pytest.raises(ValueError, match="2 0/1 digits"):
    name("float32", 64, 32, True, "1111", kernel="branch_backward_keys",
         pattern=1)
  with pytest.raises(ValueError, match="pattern 0"):
    name("float32", 64, 32, True, "11", kernel="branch_backward_keys")
  with pytest.raises(ValueError, match="pattern 1"):
    name("float32", 64, 32, True, "1111", pattern=1)
  with pytest.raises(ValueError, match="kernel 'branch_backward'"):
    name("float32", 64, 32, True, kernel="branch_backward")


# The C++ branch of the names: a program that includes the handlers' source
# (one translation unit, so `VariantName` is visible) and prints the name
# of each kernel (and, for the keys kernel, pattern) of a call read from
# stdin.
_NAMES_PROGRAM = r"""
#include "attention_ffi.cc"
#include <iostream>
int main() {
  std::string dtype, kernel;
  int64_t d, ids;
  std::string flags;  // READ1 READ2 WRITE1 WRITE2: 0, 1, or s (sources)
  int has_ids, band, low, drop, by_rows, pattern;
  int64_t rows, first_len, second_len, block_len;
  while (std::cin >> kernel >> pattern >> dtype >> d >> ids >> has_ids >>
         band >> flags >> low >> drop >> by_rows >> rows >> first_len >>
         second_len >> block_len) {
    const ffi::DataType t = dtype == "float32" ? ffi::DataType::F32
        : dtype == "bfloat16" ? ffi::DataType::BF16 : ffi::DataType::F16;
    BranchShape s{};
    s.size_per_head = d;
    s.rows = rows;
    s.key_rows[0] = first_len;
    s.key_rows[1] = second_len;
    s.num_ids = ids;
    s.stream_type = low ? t : ffi::DataType::F32;
    BranchOptions o{};
    o.band = band; o.has_ids = has_ids; o.by_rows = by_rows;
    o.read[0] = flags[0] != '0'; o.read[1] = flags[1] != '0';
    o.emit[0] = flags[2] != '0'; o.emit[1] = flags[3] != '0';
    o.sources = flags.find('s') != std::string::npos ? 3 : 0;
    o.keep_threshold = drop ? 6554 : 0;
    o.block_len = block_len;
    std::cout << VariantName(t, s, o, kernel.c_str(), pattern) << " "
              << VariantName(t, s, o, kernel.c_str(), pattern, true)
              << std::endl;
  }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_the_handler_builds_the_same_names(tmp_path):
  source = tmp_path / "names.cc"
  source.write_text(_NAMES_PROGRAM)
  program = tmp_path / "names"
  kernels = os.path.join(REPO, "etc_realformer", "kernels", "cc")
  subprocess.run(["g++", "-std=c++17", "-isystem",
                  build.default_ffi_include(), "-I", kernels,
                  str(source), "-o", str(program), "-ldl"], check=True,
                 timeout=300)
  calls = [  # dtype, D, num_ids (0: no ids), band, streams, low, dropout,
             # by_rows; the branch's lengths: rows, first_len, second_len,
             # block_len
      ("bfloat16", 64, 32, True, "1111", False, True, True,
       (4165, 4335, 256, 85)),
      ("float16", 16, 5, False, "0011", True, True, False,
       (256, 256, 4165, 1)),
      ("float32", 64, 1, True, "1100", True, False, False,
       (4128, 4320, 256, 96)),
      ("bfloat16", 64, 0, False, "0000", True, False, True,
       (230, 230, 4165, 1)),
      ("float16", 128, 100, True, "1000", True, True, True,
       (90, 120, 7, 15)),
      ("bfloat16", 64, 32, True, "ss00", False, True, True,
       (4165, 4335, 1024, 85))]
  # Each call's cubins: the forward's, the backward's queries kernel, and
  # its keys kernel per pattern (the C++ branch reads the call's four flags,
  # the name holds the pattern's two).
  kernels = [("branch_forward", 0), ("branch_backward_queries", 0),
             ("branch_backward_keys", 1), ("branch_backward_keys", 2)]
  lines, want, aligned = [], [], []
  for dtype, d, ids, band, streams, low, drop, by_rows, lengths in calls:
    for kernel, pattern in kernels:
      fields = [kernel, pattern, dtype, d, ids or 1, int(bool(ids)),
                int(band), streams, int(low), int(drop), int(by_rows),
                *lengths]
      lines.append(" ".join(map(str, fields)))
      flags = (streams[pattern - 1] + streams[pattern + 1] if pattern
               else streams)
      variant = variants.Variant(
          dtype, d, 1 << max(ids - 1, 0).bit_length() if ids else 0, band,
          flags, low, drop, by_rows, kernel, pattern)
      want.append(variant.name)
      aligned.append(variant.for_lengths(*lengths).name)
  done = subprocess.run([str(program)], input="\n".join(lines) + "\n",
                        capture_output=True, text=True, check=True)
  assert done.stdout.split()[0::2] == want
  assert done.stdout.split()[1::2] == aligned
  # The benchmark's long branch: only G (the second pattern's keys) is a
  # multiple of 16; the band's keys kernel has none, so no suffix.
  assert aligned[0] == want[0] + "_a0010"
  assert aligned[2] == want[2]
  assert aligned[3] == want[3] + "_a010"
  # Its global branch: G rows over G and N keys; a block length of 16s
  # aligns every length of the band; none of 90, 120, 7, 15 is.
  assert aligned[4] == want[4] + "_a1100"
  assert aligned[9] == want[9] + "_a1111"
  assert aligned[10] == want[10] + "_a111"
  assert aligned[16:20] == want[16:20]
  assert want[4] == "branch_forward_float16_d16_r8_dense_low_0011_drop_whole"
  assert want[16] == "branch_forward_float16_d128_r128_band_low_1000_drop_rows"
  assert want[5] == (
      "branch_backward_queries_float16_d16_r8_dense_low_0011_drop_whole")
  assert want[6] == (
      "branch_backward_keys_float16_d16_r8_dense_p1_low_01_drop_whole")
  assert want[18] == (
      "branch_backward_keys_float16_d128_r128_band_p1_low_10_drop_rows")
  # Pattern 2 of "1000" touches no stream: float32 pointers, "f32".
  assert want[19] == (
      "branch_backward_keys_float16_d128_r128_band_p2_f32_00_drop_rows")
  assert want[22] == (
      "branch_backward_keys_bfloat16_d64_r32_band_p1_f32_s0_drop_rows")


def test_relative_vocabularies_round_up_to_a_power_of_two():
  assert [variants.padded_ids(n) for n in (0, 1, 2, 3, 25, 32, 33)] == [
      0, 1, 2, 4, 32, 32, 64]


def test_aligned_digits_name_the_lengths_of_16():
  digits = variants.aligned_digits
  forward, keys = variants.FORWARD, variants.KEYS
  assert digits(forward, 4165, 4335, 256, 85) == "0010"
  assert digits(forward, 256, 256, 4165, 1) == "1100"
  assert digits(forward, 4165, 4335, 250, 85) == ""
  assert digits(keys, 4165, 4335, 256, 85, pattern=1) == ""
  assert digits(keys, 4165, 4335, 256, 85, pattern=2) == "010"
  variant = variants.Variant("bfloat16", 64, 32, True, "1111",
                             dropout=True)
  aligned = variant.for_lengths(4165, 4335, 256, 85)
  assert aligned.name == variant.name + "_a0010"
  assert aligned.aligned_lengths == ("second_len",)
  assert aligned.plain == variant
  with pytest.raises(ValueError, match="4 0/1 digits"):
    variants.variant_name("float32", 64, 32, True, aligned="010")


def test_a_handler_launches_the_aligned_cubin_where_built(tmp_path):
  variant = variants.Variant("bfloat16", 64, 32, True, "1111",
                             aligned="0010")
  assert variants.launched(variant, str(tmp_path)) == variant.plain
  (tmp_path / (variant.name + ".meta")).write_text("f 0 4 32\n")
  assert variants.launched(variant, str(tmp_path)) == variant
  assert variants.launched(variant.plain, str(tmp_path)) == (
      variant.plain)


def test_aligned_variants_per_branch_shape():
  plain = variants.default_variants(["bfloat16"], [64], [32],
                                    streams=["1111"], dropout=["rows"])
  branches = [(True, 4165, 4335, 256, 85), (False, 256, 256, 4165, 1),
              (False, 4096, 4096, 256, 1)]
  aligned = variants.aligned_variants(plain, branches)
  names = sorted(v.name.rsplit("_a", 1)[1] + " " + v.kernel + " " +
                 ("band" if v.band else "dense") + str(v.pattern)
                 for v in aligned)
  # The band's keys kernel of l2l has no length of 16: no variant.
  assert names == sorted([
      "0010 branch_forward band0", "0010 branch_backward_queries band0",
      "010 branch_backward_keys band2",
      "1100 branch_forward dense0", "1100 branch_backward_queries dense0",
      "110 branch_backward_keys dense1", "100 branch_backward_keys dense2",
      "1110 branch_forward dense0", "1110 branch_backward_queries dense0",
      "110 branch_backward_keys dense2"])


def test_launched_name_falls_back_to_the_plain_cubin(tmp_path):
  plain = "branch_forward_bfloat16_d64_r32_band_f32_1111_drop_rows"
  assert variants.launched_name(plain + "_a0010", str(tmp_path)) == plain
  assert variants.launched_name(plain, str(tmp_path)) == plain
  (tmp_path / (plain + "_a0010.meta")).write_text("f 0 4 32\n")
  assert variants.launched_name(plain + "_a0010", str(tmp_path)) == (
      plain + "_a0010")
