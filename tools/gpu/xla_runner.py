r"""Compiles and times an exported XLA module with jax/jaxlib alone.

    python -m tools.gpu.xla_runner --module_dir=DIR [--repeats=10 --warmup=3]
        [--device=gpu] [--output_jsonl=FILE] [--hlo_stats]
        [--ffi_library=build/kernels/libetc_attention_ffi.so]

DIR is what `python -m tools.bench.benchmark --mode=xla_export` wrote:
`module.hlo.pb.gz` (a gzipped serialized HloModuleProto; a plain
`module.hlo.pb` is read too), `inputs.npz` (`arg_0000`,
... in the entry computation's parameter order) and `manifest.json`. This
module imports neither TensorFlow nor the library, only the plain-Python
`tools.bench.timing`, `tools.gpu.hlo_text_stats` (what the compiled module
writes) and `tools.kernels.kernel_trace` (the profiler's kernels), so it runs
from a checkout where only jax is installed (the GPU machine): the HLO is
converted to StableHLO, compiled by that jaxlib's XLA for the first device of
the chosen platform, and called `--warmup` times (the first one timed alone),
then `--repeats` times, each timed alone with a blocking wait. Printed (and
appended to `--output_jsonl`): one JSON record with the spec, the device, every
time, the median and minimum, the device's peak memory (`memory_stats()`, where
the platform reports it), the first output's value and, when the manifest holds
TensorFlow's, their relative difference. `--hlo_stats` adds the compiled
module's fusion count, the buffers it writes (count, total, the largest, grouped
by type) and the compiled memory statistics. `--profile` adds the device time
per kernel of `--profile_runs` more calls, traced by jax's profiler: per call,
the total, the time per kind of kernel (matrix products, XLA's loop / input
(reduction) / transpose fusions, copies, ...) and the longest kernels with the
TensorFlow op each fusion was made from.

A module exported with `attention_kernel='fused'` holds typed-FFI custom
calls: `--ffi_library` (`tools/kernels/build_kernels.py`) registers their
handlers for the platform first (the CUDA ones launch the cubins of the
`cubins/` folder beside the library).

The figures are TensorFlow's XLA module run by jaxlib's XLA (often a newer
compiler than TensorFlow's), not TensorFlow itself on that device.
"""

import argparse
import glob
import gzip
import json
import os
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import numpy as np

from tools.gpu import hlo_text_stats
from tools.kernels import kernel_trace
from tools.bench.timing import emit, time_calls


def _jax_modules():
  """The jaxlib entry points, across the versions the project meets (the
  pinned CPU one and the GPU machine's): hlo_to_stablehlo, a backend,
  DeviceList, CompileOptions."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax._src.lib import xla_client  # pylint: disable=g-import-not-at-top
  try:
    from jax._src.lib import _jax  # pylint: disable=g-import-not-at-top
    hlo_to_stablehlo = _jax.mlir.hlo_to_stablehlo
  except (ImportError, AttributeError):
    from jax._src.lib import xla_extension  # pylint: disable=g-import-not-at-top
    hlo_to_stablehlo = xla_extension.mlir.hlo_to_stablehlo
  import jax.extend  # pylint: disable=g-import-not-at-top
  return jax, xla_client, hlo_to_stablehlo


# The fused kernels' custom calls (etc_realformer/kernels/cc/attention_ffi.cc,
# `EtcRegisterFfiHandlers`): target -> (host handler, CUDA handler) symbols.
FFI_TARGETS = {
    "etc_branch_forward": ("EtcBranchForwardHost", "EtcBranchForwardCuda"),
    "etc_branch_backward": ("EtcBranchBackwardHost", "EtcBranchBackwardCuda"),
}


def register_ffi_library(path: str, platform: Optional[str] = None) -> None:
  """Registers the FFI library's handlers into jaxlib for `platform` (cpu,
  gpu/cuda; default: jax's default backend)."""
  import ctypes  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  platform = (platform or jax.default_backend()).lower()
  cuda = platform in ("gpu", "cuda")
  library = ctypes.CDLL(os.path.abspath(path))
  for target, (host, gpu) in FFI_TARGETS.items():
    handler = getattr(library, gpu if cuda else host)
    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler),
                                platform="CUDA" if cuda else "cpu")


def read_module(module_dir: str) -> bytes:
  """The serialized HLO of a module directory (gzipped or plain)."""
  path = os.path.join(module_dir, "module.hlo.pb")
  if os.path.exists(path + ".gz"):
    with gzip.open(path + ".gz", "rb") as f:
      return f.read()
  with open(path, "rb") as f:
    return f.read()


def compile_module(serialized_hlo: bytes, platform: Optional[str] = None):
  """(executable, device) for the first device of `platform` (default:
  jax's default backend)."""
  jax, xla_client, hlo_to_stablehlo = _jax_modules()
  backend = jax.extend.backend.get_backend(platform)
  device = backend.local_devices()[0]
  module = hlo_to_stablehlo(serialized_hlo)
  options = xla_client.CompileOptions()
  devices = xla_client.DeviceList((device,))
  if hasattr(backend, "compile_and_load"):
    executable = backend.compile_and_load(module, devices, options)
  else:  # older jaxlib
    executable = backend.compile(module, options)
  return executable, device


def _execute(executable, buffers):
  if hasattr(executable, "execute"):
    return executable.execute(buffers)
  return executable.execute_sharded([[b] for b in buffers])


def _block(outputs):
  for out in outputs:
    if hasattr(out, "block_until_ready"):
      out.block_until_ready()
    elif isinstance(out, (list, tuple)):
      _block(out)


def _first_value(outputs) -> float:
  first = outputs[0]
  while isinstance(first, (list, tuple)):
    first = first[0]
  return float(np.asarray(first).reshape(-1)[0])


def _hlo_text(executable) -> str:
  """The compiled module's optimized HLO text ("" where jaxlib hides it)."""
  if hasattr(executable, "hlo_modules"):
    return executable.hlo_modules()[0].to_string()
  return ""


def hlo_stats(executable, top: int = 8, groups: int = 16) -> Dict[str, Any]:
  """Statistics of a compiled module: those of its optimized HLO text
  (`hlo_text_stats.text_stats`: fusions, the buffers it writes) and the
  compiled memory statistics."""
  stats = hlo_text_stats.text_stats(_hlo_text(executable), top, groups)
  if hasattr(executable, "get_compiled_memory_stats"):
    mem = executable.get_compiled_memory_stats()
    stats["compiled_memory_mib"] = {
        k: round(getattr(mem, k) / 2**20, 2)
        for k in ("argument_size_in_bytes", "output_size_in_bytes",
                  "temp_size_in_bytes", "generated_code_size_in_bytes")
        if hasattr(mem, k)}
  return stats


def profile_kernels(call, runs: int, executable=None) -> Dict[str, Any]:
  """Traces `runs` calls with jax's profiler and summarises the device's
  kernels (`kernel_trace.kernel_summary`, naming each fusion's TensorFlow
  op from `executable`'s HLO); on a platform whose trace has no device
  plane (the CPU) the summary is empty and says so."""
  import jax  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as trace_dir:
    jax.profiler.start_trace(trace_dir)
    try:
      for _ in range(runs):
        call()
    finally:
      jax.profiler.stop_trace()
    paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"),
                      recursive=True)
    if not paths:
      return {"runs": runs, "note": "the profiler wrote no trace"}
    with open(paths[0], "rb") as f:
      events = kernel_trace.trace_kernels(f.read())
  if not events:
    return {"runs": runs, "note": "no device kernels in the trace"}
  op_names = {}
  if executable is not None:
    op_names = {kernel_trace.kernel_key(b["name"]): b["op_name"]
                for b in hlo_text_stats.materialized_buffers(
                    _hlo_text(executable))}
  return kernel_trace.kernel_summary(events, runs, op_names)


def load_inputs(module_dir: str, manifest: Dict[str, Any]
                ) -> List[np.ndarray]:
  """The module's arguments: the stored ones, and random values of the
  recorded shape and dtype for those exported without their values (the
  variables of a timing export)."""
  rng = np.random.RandomState(0)
  inputs = []
  with np.load(os.path.join(module_dir, "inputs.npz")) as data:
    for i, arg in enumerate(manifest["arguments"]):
      key = f"arg_{i:04d}"
      if key in data.files:
        inputs.append(data[key])
      elif arg.get("stored", True):
        raise ValueError(f"{module_dir}: inputs.npz lacks {key} "
                         f"({arg['name']})")
      else:
        inputs.append((0.02 * rng.standard_normal(arg["shape"])).astype(
            arg["dtype"]))
  return inputs


def run(module_dir: str, repeats: int = 10, warmup: int = 3,
        platform: Optional[str] = None, with_hlo_stats: bool = False,
        compile_only: bool = False, profile_runs: int = 0
        ) -> Dict[str, Any]:
  """Compiles and times one exported module; returns its record
  (`compile_only`: the compiled module's statistics, nothing run;
  `profile_runs` > 0: the kernels of that many more calls, after the
  timed ones)."""
  jax, _, _ = _jax_modules()
  with open(os.path.join(module_dir, "manifest.json")) as f:
    manifest = json.load(f)
  serialized = read_module(module_dir)
  inputs = load_inputs(module_dir, manifest)
  start = time.perf_counter()
  executable, device = compile_module(serialized, platform)
  compile_s = time.perf_counter() - start
  if compile_only:
    return {"record_type": "xla_compile", "module_dir": module_dir,
            "spec": manifest["spec"], "device": str(device),
            "platform": device.platform, "jax_version": jax.__version__,
            "compile_s": compile_s, "hlo_stats": hlo_stats(executable)}
  buffers = [jax.device_put(x, device) for x in inputs]

  # The first call's outputs are the ones compared with TensorFlow's: a
  # training step's dropout draws from XLA's RNG state, which every call
  # advances.
  first = {}

  def call():
    outputs = _execute(executable, buffers)
    _block(outputs)
    first.setdefault("outputs", outputs)

  timing = time_calls(call, warmup, repeats)
  record: Dict[str, Any] = {
      "record_type": "xla_run", "module_dir": module_dir,
      "spec": manifest["spec"], "device": str(device),
      "platform": device.platform, "jax_version": jax.__version__,
      "compile_s": compile_s, **timing, "repeats": repeats,
      "warmup": warmup, "value": _first_value(first["outputs"])}
  memory = device.memory_stats() if hasattr(device, "memory_stats") else None
  if memory:
    record["peak_memory_gib"] = memory.get("peak_bytes_in_use", 0) / 2**30
  if "reference_value" in manifest:
    ref = manifest["reference_value"]
    record["reference_value"] = ref
    record["relative_difference"] = abs(record["value"] - ref) / max(
        abs(ref), 1e-30)
  if with_hlo_stats:
    record["hlo_stats"] = hlo_stats(executable)
  if profile_runs:
    try:
      record["kernel_profile"] = profile_kernels(call, profile_runs,
                                                 executable)
    except Exception as e:  # pylint: disable=broad-except
      # A profiler that cannot start (no CUPTI) must not lose the timing.
      record["kernel_profile"] = {"runs": profile_runs,
                                  "note": f"profiler failed: {e!r}"[:500]}
  return record


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--module_dir", required=True, action="append",
                      help="an exported module directory (repeatable)")
  parser.add_argument("--repeats", type=int, default=10)
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--device", default=None,
                      help="jax platform: cpu, gpu, tpu (default: jax's)")
  parser.add_argument("--hlo_stats", action="store_true")
  parser.add_argument("--compile_only", action="store_true",
                      help="compile and report the module's statistics only")
  parser.add_argument("--profile", action="store_true",
                      help="trace --profile_runs more calls and report the "
                      "device time per kernel")
  parser.add_argument("--profile_runs", type=int, default=3)
  parser.add_argument("--output_jsonl", default=None)
  parser.add_argument("--ffi_library", default=None,
                      help="the fused kernels' FFI library "
                      "(tools/kernels/build_kernels.py), for modules with "
                      "their custom calls")
  args = parser.parse_args(argv)
  if args.repeats < 1 or args.warmup < 1 or args.profile_runs < 1:
    parser.error("--repeats, --warmup and --profile_runs must be >= 1")
  if args.ffi_library:
    if not os.path.exists(args.ffi_library):
      print(f"error: --ffi_library {args.ffi_library}: no such file",
            file=sys.stderr)
      return 2
    register_ffi_library(args.ffi_library, args.device)
  for directory in args.module_dir:
    if not os.path.exists(os.path.join(directory, "manifest.json")):
      print(f"error: {directory}: no manifest.json (not an exported module)",
            file=sys.stderr)
      return 2
    record = run(directory, args.repeats, args.warmup, args.device,
                 args.hlo_stats, args.compile_only,
                 args.profile_runs if args.profile else 0)
    emit(record, args.output_jsonl)
  return 0


if __name__ == "__main__":
  sys.exit(main())
