r"""Compiles and times an exported XLA module with jax/jaxlib alone.

    python -m tools.xla_runner --module_dir=DIR [--repeats=10 --warmup=3]
        [--device=gpu] [--output_jsonl=FILE] [--hlo_stats]

DIR is what `python -m tools.benchmark --mode=xla_export` wrote:
`module.hlo.pb.gz` (a gzipped serialized HloModuleProto; a plain
`module.hlo.pb` is read too), `inputs.npz` (`arg_0000`,
... in the entry computation's parameter order) and `manifest.json`. This
module imports neither TensorFlow nor the library (only the plain-Python
`tools.timing`), so it runs from a checkout where only jax is installed (the
GPU machine): the HLO is converted to StableHLO, compiled
by that jaxlib's XLA for the first device of the chosen platform, and called
`--warmup` times (the first one timed alone), then `--repeats` times, each timed alone with a blocking
wait. Printed (and appended to `--output_jsonl`): one JSON record with the
spec, the device, every time, the median and minimum, the device's peak
memory (`memory_stats()`, where the platform reports it), the first
output's value and, when the manifest holds TensorFlow's, their relative
difference. `--hlo_stats` adds the compiled module's fusion count, the
buffers it writes (count, total, the largest, grouped by type) and the
compiled memory statistics. `--profile` adds the device time per kernel of
`--profile_runs` more calls, traced by jax's profiler: per call, the total,
the time per kind of kernel (matrix products, XLA's loop / input (reduction)
/ transpose fusions, copies, ...) and the longest kernels with the
TensorFlow op each fusion was made from.

The figures are TensorFlow's XLA module run by jaxlib's XLA (often a newer
compiler than TensorFlow's), not TensorFlow itself on that device.
"""

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from tools.timing import emit, time_calls


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


_ITEMSIZE = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "pred": 1,
             "u16": 2, "s64": 8, "u64": 8, "u8": 1, "f64": 8, "s8": 1}
# Instructions that write no buffer of their own.
_NOT_WRITTEN = ("parameter", "get-tuple-element", "tuple", "bitcast",
                "constant", "while")


def _computations(text: str) -> Dict[str, List[str]]:
  """HLO text -> computation name ("ENTRY" for the entry) -> its lines."""
  comps: Dict[str, List[str]] = {}
  name, body = None, []
  for line in text.splitlines():
    header = re.match(r"^(ENTRY )?%(\S+) \(", line)
    if header and line.rstrip().endswith("{"):
      name, body = ("ENTRY" if header.group(1) else header.group(2)), []
    elif line.startswith("}") and name:
      comps[name] = body
      name = None
    elif name:
      body.append(line)
  return comps


def materialized_buffers(text: str) -> List[Dict[str, Any]]:
  """The buffers a compiled module writes: every instruction of the entry
  computation and of the loops and branches it runs, not the instructions
  inside fusions (those stay in registers or caches).

  Returns:
    [{"name", "type" (e.g. "f32[4,12,4096,256]"), "opcode", "bytes",
    "op_name" (TensorFlow's op, when the metadata says)}], in module order;
    a loop body's buffers are listed once however often it runs.
  """
  comps = _computations(text)
  todo, seen, out = ["ENTRY"], set(), []
  while todo:
    comp = todo.pop()
    if comp in seen or comp not in comps:
      continue
    seen.add(comp)
    for line in comps[comp]:
      inst = re.match(r"\s*(?:ROOT )?%(\S+) = (\(.*?\)|\w+\[[\d,]*\])"
                      r"(?:\{[^}]*\})? ([a-z-]+)\(", line)
      if not inst:
        continue
      for called in re.finditer(
          r"(?:body|condition|branch_computations)=\{?%([\w.\-]+)", line):
        todo.append(called.group(1))
      if inst.group(3) in _NOT_WRITTEN:
        continue
      size = 0
      for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", inst.group(2)):
        size += _ITEMSIZE.get(dtype, 4) * int(np.prod(
            [int(d) for d in dims.split(",") if d] or [1]))
      op_name = re.search(r'op_name="([^"]*)"', line)
      out.append({"name": inst.group(1), "type": inst.group(2),
                  "opcode": inst.group(3), "bytes": size,
                  "op_name": op_name.group(1) if op_name else ""})
  return out


def hlo_stats(executable, top: int = 8, groups: int = 16) -> Dict[str, Any]:
  """Statistics of a compiled module, from its optimized HLO text: the
  fusion count, the buffers it writes (their number and total size, the
  largest ones, and the largest groups of one type), and the compiled
  memory statistics.

  The written bytes are a lower bound of the memory traffic (each buffer is
  also read at least once): a change that removes score-sized tensors shows
  here as fewer buffers of their type.
  """
  text = executable.hlo_modules()[0].to_string() if hasattr(
      executable, "hlo_modules") else ""
  stats: Dict[str, Any] = {"fusions": len(re.findall(r"\bfusion\(", text)),
                           "instructions": text.count("\n")}
  buffers = materialized_buffers(text)
  stats["written_buffers"] = len(buffers)
  stats["written_mib"] = round(sum(b["bytes"] for b in buffers) / 2**20, 1)
  largest = sorted(buffers, key=lambda b: -b["bytes"])[:top]
  stats["largest_buffers"] = [
      {"name": b["name"], "type": b["type"], "mib": round(b["bytes"] / 2**20,
                                                          2),
       "op_name": b["op_name"]} for b in largest]
  by_type: Dict[str, List[int]] = {}
  for b in buffers:
    count_bytes = by_type.setdefault(b["type"], [0, 0])
    count_bytes[0] += 1
    count_bytes[1] += b["bytes"]
  stats["buffer_groups"] = [
      {"type": t, "count": c, "mib": round(n / 2**20, 1)}
      for t, (c, n) in sorted(by_type.items(), key=lambda kv: -kv[1][1])
  ][:groups]
  if hasattr(executable, "get_compiled_memory_stats"):
    mem = executable.get_compiled_memory_stats()
    stats["compiled_memory_mib"] = {
        k: round(getattr(mem, k) / 2**20, 2)
        for k in ("argument_size_in_bytes", "output_size_in_bytes",
                  "temp_size_in_bytes", "generated_code_size_in_bytes")
        if hasattr(mem, k)}
  return stats


def kernel_kind(name: str) -> str:
  """The kind of a device kernel, from its name: 'gemm' (cuBLAS, CUTLASS,
  XLA's Triton GEMM fusions), 'transpose' (XLA's transpose kernels), an XLA
  fusion's kind (the first word of `loop_add_fusion_3`,
  `input_reduce_fusion`, ...), 'copy', 'memset', or 'other'."""
  low = name.lower()
  if any(k in low for k in ("gemm", "cutlass", "xmma", "cublas", "matmul",
                            "dot_", "nvjet")):  # nvjet: cuBLAS's kernels
    return "gemm"
  if "transpose" in low and "fusion" not in low:  # XLA's wrapped_transpose
    return "transpose"
  if low.startswith(("memcpy", "copy")):
    return "copy"
  if low.startswith("memset"):
    return "memset"
  if "fusion" in low:
    return low.split("_", 1)[0]
  return "other"


def _kernel_key(name: str) -> str:
  """HLO instruction names and kernel names alike (`loop_add_fusion.3` is
  launched as `loop_add_fusion_3`)."""
  return re.sub(r"[.\-]", "_", name)


def kernel_summary(events: Iterable[Tuple[str, float]], runs: int,
                   op_names: Optional[Dict[str, str]] = None,
                   top: int = 25) -> Dict[str, Any]:
  """Per-call device time of kernels: total, by kind, the longest.

  Args:
    events: (kernel name, duration in ns) of every kernel of `runs` calls.
    runs: how many calls the events cover.
    op_names: HLO instruction name -> TensorFlow op name (`_kernel_key`'d),
      to name what each fusion computes.
    top: how many kernels to list.
  """
  per_name: Dict[str, List[float]] = collections.defaultdict(lambda: [0, 0])
  for name, ns in events:
    per_name[name][0] += 1
    per_name[name][1] += ns
  total = sum(ns for _, ns in per_name.values())
  kinds: Dict[str, List[float]] = collections.defaultdict(lambda: [0, 0])
  for name, (count, ns) in per_name.items():
    kinds[kernel_kind(name)][0] += count
    kinds[kernel_kind(name)][1] += ns
  ms = lambda ns: round(ns / 1e6 / runs, 3)
  op_names = op_names or {}
  return {
      "runs": runs,
      "kernel_ms_per_call": ms(total),
      "kernels_per_call": round(sum(c for c, _ in per_name.values()) / runs,
                                1),
      "by_kind": [{"kind": k, "ms": ms(ns), "share": round(ns / total, 3),
                   "kernels_per_call": round(c / runs, 1)}
                  for k, (c, ns) in sorted(kinds.items(),
                                           key=lambda kv: -kv[1][1])]
                 if total else [],
      "longest": [{"kernel": n, "kind": kernel_kind(n), "ms": ms(ns),
                   "per_call": round(c / runs, 1),
                   "op_name": op_names.get(_kernel_key(n), "")}
                  for n, (c, ns) in sorted(per_name.items(),
                                           key=lambda kv: -kv[1][1])[:top]],
  }


# The profiler's trace is an XSpace protocol buffer (tsl/profiler/protobuf/
# xplane.proto). jax's own reader (`jax.profiler.ProfileData`) is missing
# from some jaxlib builds, and the GPU machine has no protobuf package, so
# the few fields read here are decoded from the wire format by hand.
_XSPACE_PLANES = 1
_XPLANE_NAME, _XPLANE_LINES, _XPLANE_EVENT_METADATA = 2, 3, 4
_XLINE_NAME, _XLINE_EVENTS = 2, 4
_XEVENT_METADATA_ID, _XEVENT_DURATION_PS = 1, 3
_XEVENT_METADATA_NAME = 2


def _varint(buf: bytes, i: int) -> Tuple[int, int]:
  shift = value = 0
  while True:
    byte = buf[i]
    i += 1
    value |= (byte & 0x7F) << shift
    if byte < 0x80:
      return value, i
    shift += 7


def proto_fields(buf: bytes) -> Iterable[Tuple[int, Any]]:
  """(field number, value) of one protocol buffer message: ints for varints,
  bytes for length-delimited fields (strings, sub-messages), raw bytes for
  fixed-width ones."""
  i, end = 0, len(buf)
  while i < end:
    key, i = _varint(buf, i)
    field, wire = key >> 3, key & 7
    if wire == 0:
      value, i = _varint(buf, i)
    elif wire == 2:
      size, i = _varint(buf, i)
      value, i = buf[i:i + size], i + size
    elif wire in (1, 5):
      size = 8 if wire == 1 else 4
      value, i = buf[i:i + size], i + size
    else:
      raise ValueError(f"protocol buffer wire type {wire} not supported")
    yield field, value


def trace_kernels(xspace: bytes) -> List[Tuple[str, float]]:
  """(kernel name, duration in ns) of every event on the device planes'
  stream lines of a serialized XSpace. Other lines ("XLA Ops", "XLA
  Modules", "Steps") are derived from the streams and would count twice."""
  events = []
  for field, plane in proto_fields(xspace):
    if field != _XSPACE_PLANES:
      continue
    name, lines, names = "", [], {}
    for f, v in proto_fields(plane):
      if f == _XPLANE_NAME:
        name = bytes(v).decode("utf-8", "replace")
      elif f == _XPLANE_LINES:
        lines.append(v)
      elif f == _XPLANE_EVENT_METADATA:  # map<int64, XEventMetadata> entry
        entry = dict(proto_fields(v))
        meta = dict(proto_fields(entry.get(2, b"")))
        names[entry.get(1, 0)] = bytes(
            meta.get(_XEVENT_METADATA_NAME, b"")).decode("utf-8", "replace")
    if not name.startswith("/device:"):
      continue
    for line in lines:
      line_name, line_events = "", []
      for f, v in proto_fields(line):
        if f == _XLINE_NAME:
          line_name = bytes(v).decode("utf-8", "replace")
        elif f == _XLINE_EVENTS:
          line_events.append(v)
      if not line_name.startswith("Stream"):
        continue
      for event in line_events:
        fields = dict(proto_fields(event))
        events.append((names.get(fields.get(_XEVENT_METADATA_ID, 0), "?"),
                       fields.get(_XEVENT_DURATION_PS, 0) / 1000.0))
  return events


def profile_kernels(call, runs: int, executable=None) -> Dict[str, Any]:
  """Traces `runs` calls with jax's profiler and summarises the device's
  kernels (`kernel_summary`); on a platform whose trace has no device plane
  (the CPU) the summary is empty and says so."""
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
      events = trace_kernels(f.read())
  if not events:
    return {"runs": runs, "note": "no device kernels in the trace"}
  op_names = {}
  if executable is not None and hasattr(executable, "hlo_modules"):
    text = executable.hlo_modules()[0].to_string()
    op_names = {_kernel_key(b["name"]): b["op_name"]
                for b in materialized_buffers(text)}
  return kernel_summary(events, runs, op_names)


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
  args = parser.parse_args(argv)
  if args.repeats < 1 or args.warmup < 1 or args.profile_runs < 1:
    parser.error("--repeats, --warmup and --profile_runs must be >= 1")
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
