"""Device time per kernel, from a jax profiler trace.

`trace_kernels` reads the kernels of a serialized XSpace (the protocol
buffer the profiler writes, tsl/profiler/protobuf/xplane.proto);
`kernel_summary` sums them per call: the total, the time per kind of kernel
(`kernel_kind`: matrix products, XLA's loop / input (reduction) / transpose
fusions, copies, ...) and the longest kernels, with the TensorFlow op each
fusion was made from.

jax's own reader (`jax.profiler.ProfileData`) is missing from some jaxlib
builds, and the GPU machine has no protobuf package (nor TensorFlow), so the
few fields read here are decoded from the protocol buffer wire format by
hand (`proto_fields`). Plain Python: `tools.gpu.xla_runner --profile` uses it
there.
"""

import collections
import re
from typing import Any, Dict, Iterable, List, Optional, Tuple

# The field numbers read (xplane.proto).
_XSPACE_PLANES = 1
_XPLANE_NAME, _XPLANE_LINES, _XPLANE_EVENT_METADATA = 2, 3, 4
_XLINE_NAME, _XLINE_EVENTS = 2, 4
_XEVENT_METADATA_ID, _XEVENT_DURATION_PS = 1, 3
_XEVENT_METADATA_NAME = 2


def _varint(buf: bytes, i: int) -> Tuple[int, int]:
  """(the varint at buf[i], the index after it)."""
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
  fixed-width ones.

  Raises:
    ValueError: a wire type other than those (the deprecated groups).
  """
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


def _text(value: bytes) -> str:
  return bytes(value).decode("utf-8", "replace")


def _read_plane(plane: bytes) -> Tuple[str, List[bytes], Dict[int, str]]:
  """An XPlane's (name, serialized lines, event metadata id -> name)."""
  name, lines, names = "", [], {}
  for f, v in proto_fields(plane):
    if f == _XPLANE_NAME:
      name = _text(v)
    elif f == _XPLANE_LINES:
      lines.append(v)
    elif f == _XPLANE_EVENT_METADATA:  # map<int64, XEventMetadata> entry
      entry = dict(proto_fields(v))
      meta = dict(proto_fields(entry.get(2, b"")))
      names[entry.get(1, 0)] = _text(meta.get(_XEVENT_METADATA_NAME, b""))
  return name, lines, names


def trace_kernels(xspace: bytes) -> List[Tuple[str, float]]:
  """(kernel name, duration in ns) of every event on the device planes'
  stream lines of a serialized XSpace. Other lines ("XLA Ops", "XLA
  Modules", "Steps") are derived from the streams and would count twice."""
  events = []
  for field, plane in proto_fields(xspace):
    if field != _XSPACE_PLANES:
      continue
    name, lines, names = _read_plane(plane)
    if not name.startswith("/device:"):
      continue
    for line in lines:
      line_name, line_events = "", []
      for f, v in proto_fields(line):
        if f == _XLINE_NAME:
          line_name = _text(v)
        elif f == _XLINE_EVENTS:
          line_events.append(v)
      if not line_name.startswith("Stream"):
        continue
      for event in line_events:
        fields = dict(proto_fields(event))
        events.append((names.get(fields.get(_XEVENT_METADATA_ID, 0), "?"),
                       fields.get(_XEVENT_DURATION_PS, 0) / 1000.0))
  return events


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


def kernel_key(name: str) -> str:
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
    op_names: HLO instruction name -> TensorFlow op name (`kernel_key`'d),
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
                   "op_name": op_names.get(kernel_key(n), "")}
                  for n, (c, ns) in sorted(per_name.items(),
                                           key=lambda kv: -kv[1][1])[:top]],
  }
