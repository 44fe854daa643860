"""The CUDA handlers' launches (`attention_ffi.cc`, `BranchForwardCuda`,
`BranchBackwardCuda`), checked without a GPU against a recording driver.

On a GPU a launch whose arguments are out of order, or whose grid, block
or shared memory disagree with the cubin, computes garbage or faults; no
CPU test of the host handlers can see it. Here a program includes the
handlers' source, calls the CUDA handlers on buffers that are only
shapes and addresses (nothing is dereferenced), and a stand-in
`libcuda.so.1` prints every driver call: each launch's function, grid,
block, shared bytes, stream and argument bytes. The test reads them back
through the kernels' own signatures
(`etc_realformer.kernels.build.SIGNATURES`, which the cubin build checks
against `triton_attention`) and the names the cubins are built under
(`variants.variant_name`).
"""

import dataclasses
import os
import shutil
import struct
import subprocess
from typing import Dict, List, Optional, Tuple

import pytest

from etc_realformer.kernels import build
from etc_realformer.kernels import variants as kernel_variants

pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None or shutil.which("gcc") is None,
    reason="needs gcc and g++")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
STREAM = 0x5EED  # the handler's stream, as the recording driver hands it

# A stand-in for the driver: loads a "cubin" (its text names the module),
# and prints each call the handlers make. `FakeCudaExpect` gives, per
# coming launch, the byte size of each kernel argument (8 or 4), so the
# launch's arguments are read at their sizes.
_DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static char expected[8][256];
static int launches;
void FakeCudaExpect(int launch, const char* sizes) {
  strncpy(expected[launch], sizes, 255);
  if (launch == 0) launches = 0;
}
int cuModuleLoadData(void** module, const void* image) {
  *module = strdup((const char*)image);
  return 0;
}
int cuModuleGetFunction(void** function, void* module, const char* name) {
  char* f = malloc(strlen(name) + 1);
  strcpy(f, name);
  *function = f;
  printf("load %s %s\n", (const char*)module, name);
  return 0;
}
int cuFuncSetAttribute(void* function, int attribute, int value) {
  printf("attribute %s %d %d\n", (const char*)function, attribute, value);
  return 0;
}
int cuCtxGetCurrent(void** context) { *context = (void*)0x1; return 0; }
int cuMemsetD32Async(unsigned long long ptr, unsigned value, size_t count,
                     void* stream) {
  printf("memset %llx %u %zu %llx\n", ptr, value, count,
         (unsigned long long)stream);
  return 0;
}
int cuGetErrorString(int r, const char** text) { *text = "fake"; return 0; }
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz,
                   unsigned bx, unsigned by, unsigned bz, unsigned shared,
                   void* stream, void** params, void** extra) {
  const char* sizes = expected[launches++];
  printf("launch %s %u %u %u %u %u %u %u %llx %d", (const char*)f, gx, gy,
         gz, bx, by, bz, shared, (unsigned long long)stream, extra == NULL);
  for (int i = 0; sizes[i]; ++i) {
    if (sizes[i] == '8') {
      printf(" %llx", (unsigned long long)*(uint64_t*)params[i]);
    } else {
      printf(" %x", *(uint32_t*)params[i]);
    }
  }
  printf("\n");
  return 0;
}
"""

# Calls the handlers on the calls read from stdin, one per line:
#   forward|backward <13 attributes> <launches> <sizes>... <buffers>
#   <dtype> <rank> <dims>... <address> (per buffer, in the handler's order)
# and prints each call's result after the driver's lines.
_PROGRAM = r"""
#include "attention_ffi.cc"
#include <dlfcn.h>
#include <iostream>
#include <sstream>
int main() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  auto expect = reinterpret_cast<void (*)(int, const char*)>(
      dlsym(driver, "FakeCudaExpect"));
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string kind;
    int band, has_ids, r1, r2, e1, e2, by_rows, launches, count;
    int64_t block_len, keep, sources;
    float scale1, scale2, gain;
    in >> kind >> band >> block_len >> has_ids >> r1 >> r2 >> e1 >> e2 >>
        scale1 >> scale2 >> keep >> gain >> by_rows >> sources >> launches;
    for (int i = 0; i < launches; ++i) {
      std::string sizes;
      in >> sizes;
      expect(i, sizes.c_str());
    }
    in >> count;
    std::vector<XLA_FFI_Buffer> buffers(count);
    std::vector<std::vector<int64_t>> dims(count);
    for (int i = 0; i < count; ++i) {
      int dtype, rank;
      unsigned long long address;
      in >> dtype >> rank;
      dims[i].resize(rank);
      for (int j = 0; j < rank; ++j) in >> dims[i][j];
      in >> std::hex >> address >> std::dec;
      buffers[i] = {XLA_FFI_Buffer_STRUCT_SIZE, nullptr,
                    static_cast<XLA_FFI_DataType>(dtype),
                    reinterpret_cast<void*>(address), rank, dims[i].data()};
    }
    auto b = [&](int i) { return ffi::AnyBuffer(&buffers[i]); };
    auto f32 = [&](int i) { return ffi::Buffer<ffi::F32>(&buffers[i]); };
    auto s8 = [&](int i) { return ffi::Buffer<ffi::S8>(&buffers[i]); };
    CUstream stream = reinterpret_cast<CUstream>(0x5EED);
    ffi::Error e = ffi::Error::Success();
    if (kind == "forward") {
      e = BranchForwardCuda(
          stream, b(0), b(1), b(2), b(3), b(4), f32(5), s8(6), s8(7), f32(8),
          b(9), b(10), b(11), b(12), b(13), b(14), band, block_len, has_ids,
          r1, r2, e1, e2, scale1, scale2, keep, gain, by_rows, sources,
          b(15), f32(16), b(17), b(18));
    } else {
      e = BranchBackwardCuda(
          stream, b(0), b(1), b(2), b(3), b(4), f32(5), s8(6), s8(7), f32(8),
          b(9), b(10), b(11), b(12), b(13), b(14), b(15), f32(16), b(17),
          b(18), b(19), band, block_len, has_ids, r1, r2, e1, e2, scale1,
          scale2, keep, gain, by_rows, sources, b(20), b(21), b(22), b(23),
          b(24), f32(25), b(26), b(27), f32(28));
    }
    std::cout << "result " << (e.success() ? "ok" : e.message()) << std::endl;
  }
}
"""

# XLA_FFI_DataType codes (xla/ffi/api/c_api.h).
FFI_DTYPES = {"int8": 2, "int32": 4, "float16": 10, "float32": 11,
              "bfloat16": 16}
# The handlers' operand and result order (the bindings in attention_ffi.cc).
FORWARD_BUFFERS = ("q", "k1", "v1", "k2", "v2", "per_id", "codes1", "codes2",
                   "valid", "prev1", "prev2", "src_q", "src_k1", "src_k2",
                   "seeds", "ctx", "lse", "new1", "new2")
BACKWARD_BUFFERS = FORWARD_BUFFERS[:15] + (
    "ctx", "lse", "dctx", "dnew1", "dnew2", "dq", "dk1", "dv1", "dk2", "dv2",
    "dper_id", "dprev1", "dprev2", "delta")
# Each kernel's cubin metadata (the function is named fn_<kernel>): shared
# bytes (the forward's above 48 KiB, which needs the attribute), warps,
# tile.
META = {build.FORWARD: (50176, 4, 32),
        build.QUERIES: (20480, 4, 16),
        build.KEYS: (30720, 8, 64)}


@dataclasses.dataclass
class Branch:
  """One branch's call: shapes (band: N = nb * b queries over N + 2b padded
  key rows; dense: K1 keys), options and the kernels it launches."""
  dtype: str
  batch: int
  heads: int
  rows: int
  head_size: int
  band: bool
  block_len: int
  first_len: int
  second_len: int
  num_ids: int          # 0: no relative ids (a [B, N, 1, H] placeholder)
  read: Tuple[bool, bool]
  emit: Tuple[bool, bool]
  stream_dtype: str
  sources: int
  keep_threshold: int
  by_rows: bool
  scales: Tuple[float, float] = (1.0, 0.5)
  gain: float = 1.25

  @property
  def codes1_stride(self) -> int:
    return -(-3 * self.block_len // 16) * 16 if self.band else self.first_len

  @property
  def widths(self) -> Tuple[int, int]:
    return (3 * self.block_len if self.band else self.first_len,
            self.second_len)

  def streams(self) -> str:
    read = "s" if self.sources else "1"
    return "".join(read if r else "0" for r in self.read) + "".join(
        "1" if e else "0" for e in self.emit)

  def shapes(self) -> Dict[str, Tuple[str, Tuple[int, ...]]]:
    """Every buffer's (dtype, dims); unused ones are placeholders."""
    b, h, n, d = self.batch, self.heads, self.rows, self.head_size
    t, s = self.dtype, self.stream_dtype
    k1 = (b, h, self.first_len, d)
    k2 = (b, h, self.second_len, d)
    joined = self.sources * d
    out = {"q": (t, (b, h, n, d)), "k1": (t, k1), "v1": (t, k1),
           "k2": (t, k2), "v2": (t, k2),
           "per_id": ("float32", (b, n, max(self.num_ids, 1), h)),
           "codes1": ("int8", (b, n, self.codes1_stride)),
           "codes2": ("int8", (b, n, self.second_len)),
           "valid": ("float32", (b, n)), "seeds": ("int32", (4,)),
           "ctx": (t, (b, h, n, d)), "lse": ("float32", (b, h, n)),
           "src_q": (t, (b, h, n, joined) if self.sources else (1,)),
           "delta": ("float32", (b, h, n))}
    for p in range(2):
      stream = (s, (b, h, n, self.widths[p]))
      placeholder = ("float32", (1,))
      read_prev = self.read[p] and not self.sources
      out[f"prev{p + 1}"] = stream if read_prev else placeholder
      out[f"new{p + 1}"] = stream if self.emit[p] else placeholder
      out[f"dnew{p + 1}"] = stream if self.emit[p] else placeholder
      out[f"dprev{p + 1}"] = (
          ("float32" if self.sources else s, stream[1]) if self.read[p]
          else placeholder)
      out[f"src_k{p + 1}"] = ((t, (b, h, (k1, k2)[p][2], joined))
                              if self.sources and self.read[p]
                              else placeholder)
    for name in ("q", "k1", "v1", "k2", "v2", "per_id", "ctx"):
      out["d" + name] = out[name]
    return out

  def variant(self, kernel: str, pattern: int = 0,
              aligned: bool = False) -> str:
    """The cubin's name: the plain one, or the one aligned for this
    branch's lengths (the plain one where none is a multiple of 16)."""
    flags = self.streams()
    if pattern:
      flags = flags[pattern - 1] + flags[pattern + 1]
    low = self.stream_dtype != "float32" and set(flags) != {"0"}
    variant = kernel_variants.Variant(
        self.dtype, self.head_size, kernel_variants.padded_ids(self.num_ids),
        self.band, flags, low, self.keep_threshold > 0, self.by_rows,
        kernel, pattern)
    if aligned:
      variant = variant.for_lengths(self.rows, self.first_len,
                                    self.second_len, self.block_len)
    return variant.name


def _launches(backward: bool) -> List[Tuple[str, int]]:
  """The (kernel, pattern) launches of a forward or backward call."""
  if not backward:
    return [(build.FORWARD, 0)]
  return [(build.QUERIES, 0), (build.KEYS, 1),
          (build.KEYS, 2)]


def _sizes(kernel: str) -> str:
  """The launch's argument sizes: the signature's, then Triton's two
  scratch pointers."""
  signature = build.SIGNATURES[kernel]
  return ("8" * len(signature.pointers) + "4" * len(signature.ints) +
          "4" * len(signature.floats) + "88")


def _addresses(names) -> Dict[str, int]:
  return {name: (i + 1) << 32 for i, name in enumerate(names)}


def _call_line(branch: Branch, backward: bool) -> str:
  names = BACKWARD_BUFFERS if backward else FORWARD_BUFFERS
  shapes, addresses = branch.shapes(), _addresses(names)
  attrs = [int(branch.band), branch.block_len, int(branch.num_ids > 0),
           *map(int, branch.read), *map(int, branch.emit), *branch.scales,
           branch.keep_threshold, branch.gain, int(branch.by_rows),
           branch.sources]
  launches = _launches(backward)
  fields = ["backward" if backward else "forward", *attrs, len(launches),
            *(_sizes(kernel) for kernel, _ in launches), len(names)]
  for name in names:
    dtype, dims = shapes[name]
    fields += [FFI_DTYPES[dtype], len(dims), *dims, f"{addresses[name]:x}"]
  return " ".join(map(str, fields))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  """The stand-in driver and the program that calls the handlers, built
  once (the program compiles the handlers' source)."""
  folder = tmp_path_factory.mktemp("cuda_launches")
  include = build.default_ffi_include()
  subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1",
                  "-x", "c", "-", "-o", str(folder / "libcuda.so.1")],
                 input=_DRIVER, text=True, check=True, timeout=120)
  subprocess.run(["g++", "-std=c++17", "-isystem", include, "-I",
                  os.path.join(REPO, "etc_realformer", "kernels", "cc"),
                  "-x", "c++", "-", "-o", str(folder / "launches"), "-ldl"],
                 input=_PROGRAM, text=True, check=True, timeout=300)
  return folder


def _write_cubins(cubins, calls: List[Tuple[Branch, bool]],
                  aligned: bool = False) -> None:
  """Stand-in cubins and their metadata for every kernel the calls launch
  (and, with `aligned`, the ones aligned for their lengths beside)."""
  cubins.mkdir()
  for branch, backward in calls:
    for kernel, pattern in _launches(backward):
      shared, warps, tile = META[kernel]
      for variant in {branch.variant(kernel, pattern),
                      branch.variant(kernel, pattern, aligned)}:
        (cubins / f"{variant}.meta").write_text(
            f"fn_{kernel} {shared} {warps} {tile}\n")
        (cubins / f"{variant}.cubin").write_bytes(variant.encode() + b"\0")


def _run(built, cubins, calls: List[Tuple[Branch, bool]]) -> List[List[str]]:
  """Each call's printed lines (driver calls, then `result ...`)."""
  env = dict(os.environ, LD_LIBRARY_PATH=str(built),
             ETC_KERNELS_CUBIN_DIR=str(cubins))
  done = subprocess.run(
      [str(built / "launches")],
      input="".join(_call_line(*c) + "\n" for c in calls),
      capture_output=True, text=True, env=env, check=True, timeout=60)
  out, current = [], []
  for line in done.stdout.splitlines():
    current.append(line)
    if line.startswith("result "):
      out.append(current)
      current = []
  assert len(out) == len(calls), done.stdout
  return out


def _decoded(kernel: str, words: List[str]) -> Dict[str, object]:
  """A launch line's arguments by the kernel's signature names."""
  signature = build.SIGNATURES[kernel]
  values = iter(words)
  out: Dict[str, object] = {}
  for name, _ in signature.pointers:
    out[name] = int(next(values), 16)
  for name in signature.ints:
    out[name] = struct.unpack("<i", struct.pack("<I", int(next(values),
                                                          16)))[0]
  for name in signature.floats:
    out[name] = struct.unpack("<f", struct.pack("<I", int(next(values),
                                                          16)))[0]
  out["scratch"] = [int(next(values), 16), int(next(values), 16)]
  assert next(values, None) is None
  return out


def _expected(branch: Branch, kernel: str, pattern: int,
              addresses: Dict[str, int]) -> Dict[str, object]:
  """What the kernel must be launched with: each pointer its buffer (the
  keys kernel's pattern p: k_p, v_p, codes_p, prev_p, src_k_p, dnew_p,
  dk_p, dv_p), the shapes as ints, the attributes as floats."""
  signature = build.SIGNATURES[kernel]
  out: Dict[str, object] = {}
  for name, _ in signature.pointers:
    buffer = name
    if kernel == build.KEYS and name in (
        "k", "v", "codes", "prev", "src_k", "dnew", "dk", "dv"):
      buffer = f"{name}{pattern}"
    out[name] = addresses[buffer]
  key_rows = (branch.first_len, branch.second_len)
  ints = dict(batch_size=branch.batch, num_heads=branch.heads,
              num_rows=branch.rows, first_len=branch.first_len,
              second_len=branch.second_len, num_ids=max(branch.num_ids, 1),
              block_len=branch.block_len, codes1_stride=branch.codes1_stride,
              num_sources=branch.sources, keep_threshold=branch.keep_threshold)
  if pattern:
    ints.update(key_rows=key_rows[pattern - 1],
                codes_stride=(branch.codes1_stride, branch.second_len)[
                    pattern - 1])
  for name in signature.ints:
    out[name] = ints[name]
  floats = dict(gain=branch.gain, scale1=branch.scales[0],
                scale2=branch.scales[1])
  if pattern:
    floats["scale"] = branch.scales[pattern - 1]
  for name in signature.floats:
    out[name] = floats[name]
  out["scratch"] = [0, 0]
  return out


def _check_call(branch: Branch, backward: bool, lines: List[str],
                memset: Optional[str]) -> None:
  """One call's driver lines against its kernels."""
  assert lines[-1] == "result ok", lines
  names = BACKWARD_BUFFERS if backward else FORWARD_BUFFERS
  addresses = _addresses(names)
  launches = [line.split() for line in lines if line.startswith("launch ")]
  kernels = _launches(backward)
  assert len(launches) == len(kernels), lines
  memsets = [line.split() for line in lines if line.startswith("memset ")]
  if memset is None:
    assert not memsets, lines
  else:  # dper_id's zeros, before the queries kernel, on the stream
    count = branch.batch * branch.rows * branch.heads
    assert memsets == [["memset", f"{addresses[memset]:x}", "0", str(count),
                        f"{STREAM:x}"]]
    assert lines.index(" ".join(memsets[0])) < lines.index(
        next(line for line in lines if line.startswith("launch ")))
  for (kernel, pattern), words in zip(kernels, launches):
    shared, warps, tile = META[kernel]
    extent = ((branch.first_len, branch.second_len)[pattern - 1] if pattern
              else branch.rows)
    assert words[1] == f"fn_{kernel}"
    assert list(map(int, words[2:9])) == [
        -(-extent // tile), branch.batch * branch.heads, 1, 32 * warps, 1, 1,
        shared]
    assert words[9:11] == [f"{STREAM:x}", "1"]  # the stream; no `extra`
    assert _decoded(kernel, words[11:]) == _expected(branch, kernel, pattern,
                                                     addresses)
    variant = branch.variant(kernel, pattern)
    assert f"load {variant} fn_{kernel}" in lines


# The benchmark's long branch (4096 tokens, block 85 with 2 padded blocks,
# 256 global tokens, 12 heads, 32 relative ids), RealFormer streams read
# and written on both patterns, dropout by rows.
LONG = Branch("bfloat16", batch=4, heads=12, rows=4165, head_size=64,
              band=True, block_len=85, first_len=4165 + 170, second_len=256,
              num_ids=25, read=(True, True), emit=(True, True),
              stream_dtype="float32", sources=0, keep_threshold=6554,
              by_rows=True)
# Its global branch: dense over the global keys, then the long ones; no ids;
# the first layer's streams (emitted only) in bfloat16; dropout over the
# whole tensor.
GLOBAL = Branch("bfloat16", batch=4, heads=12, rows=256, head_size=64,
                band=False, block_len=1, first_len=256, second_len=4165,
                num_ids=0, read=(False, False), emit=(True, True),
                stream_dtype="bfloat16", sources=0, keep_threshold=6554,
                by_rows=False)
# Recomputed streams: the l2l sum made from 11 earlier layers; float16,
# no dropout.
SOURCES = dataclasses.replace(
    LONG, dtype="float16", read=(True, False), emit=(False, False),
    sources=11, keep_threshold=0, num_ids=32)


def test_launches_match_the_kernels_signatures(built, tmp_path):
  calls = [(LONG, False), (LONG, True), (GLOBAL, False), (GLOBAL, True),
           (SOURCES, False), (SOURCES, True)]
  _write_cubins(tmp_path / "cubins", calls)
  results = _run(built, tmp_path / "cubins", calls)
  for (branch, backward), lines in zip(calls, results):
    memset = "dper_id" if backward and not branch.num_ids else None
    _check_call(branch, backward, lines, memset)
  attributes = [line for lines in results for line in lines
                if line.startswith("attribute ")]
  # Only the forward cubins ask for more than 48 KiB of shared memory: the
  # limit is raised (attribute 8, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_
  # SIZE_BYTES) once per cubin, when it loads.
  assert attributes == [
      f"attribute fn_{build.FORWARD} 8 50176"] * 3


def test_a_missing_cubin_fails_the_call_before_any_launch(built, tmp_path):
  """The backward loads all three kernels before the first launch: with
  one keys cubin gone it launches nothing and names the file."""
  missing = LONG.variant(build.KEYS, 2)
  _write_cubins(tmp_path / "cubins", [(LONG, True)])
  os.remove(tmp_path / "cubins" / f"{missing}.meta")
  lines, = _run(built, tmp_path / "cubins", [(LONG, True)])
  assert not [line for line in lines if line.startswith("launch ")], lines
  assert lines[-1].startswith("result no compiled kernel ")
  assert lines[-1].endswith(f"{missing}.meta (build it with python -m "
                            "tools.kernels.build_kernels)")


def test_an_aligned_cubin_is_launched_where_built(built, tmp_path):
  """The benchmark's long branch has one length of 16, G: the forward, the
  queries kernel and the l2g keys kernel load the cubins aligned for it,
  the l2l keys kernel (none of N, N + 2b, b is) its plain one; a build
  without them (the test above) loads the plain ones."""
  calls = [(LONG, False), (LONG, True)]
  _write_cubins(tmp_path / "cubins", calls, aligned=True)
  results = _run(built, tmp_path / "cubins", calls)
  loads = [line.split()[1] for lines in results for line in lines
           if line.startswith("load ")]
  assert loads == [LONG.variant(kernel, pattern, aligned=True)
                   for backward in (False, True)
                   for kernel, pattern in _launches(backward)]
  assert [name.rsplit("_", 1)[1] for name in loads] == [
      "a0010", "a0010", "rows", "a010"]
  for (branch, backward), lines in zip(calls, results):
    assert lines[-1] == "result ok", lines
    assert len([line for line in lines if line.startswith("launch ")]) == (
        3 if backward else 1)
