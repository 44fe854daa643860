"""What a compiled XLA module writes, read from its optimized HLO text.

`materialized_buffers` lists the buffers the module writes: every
instruction of the entry computation and of the loops and branches it runs,
not the instructions inside fusions (those stay in registers or caches).
`text_stats` sums them up: the fusion count, the number and total size of
the written buffers, the largest ones (with the TensorFlow op each came
from, where the metadata says) and the largest groups of one type.

The written bytes are a lower bound of the memory traffic (each buffer is
also read at least once): a change that removes score-sized tensors shows
here as fewer buffers of their type.

Plain Python and NumPy: `tools.gpu.xla_runner` uses it on the GPU machine,
which has no TensorFlow.
"""

import re
from typing import Any, Dict, List

import numpy as np

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
  """The buffers a compiled module writes (see the module docstring).

  Args:
    text: the optimized module's HLO text.

  Returns:
    [{"name", "type" (e.g. "f32[4,12,4096,256]"), "opcode", "bytes",
    "op_name" (TensorFlow's op, when the metadata says), "target" (a
    custom call's, e.g. "etc_branch_forward"; else "")}], in module order;
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
      target = re.search(r'custom_call_target="([^"]*)"', line)
      out.append({"name": inst.group(1), "type": inst.group(2),
                  "opcode": inst.group(3), "bytes": size,
                  "op_name": op_name.group(1) if op_name else "",
                  "target": target.group(1) if target else ""})
  return out


def text_stats(text: str, top: int = 8, groups: int = 16) -> Dict[str, Any]:
  """Statistics of an optimized module's HLO text.

  Args:
    text: the HLO text ("" gives zeros).
    top: how many of the largest buffers to list.
    groups: how many of the largest groups of one type to list.

  Returns:
    {"fusions", "instructions", "written_buffers", "written_mib",
    "custom_call_mib": {target: MiB its calls write},
    "largest_buffers": [{"name", "type", "mib", "op_name"}],
    "buffer_groups": [{"type", "count", "mib"}]}.
  """
  stats: Dict[str, Any] = {"fusions": len(re.findall(r"\bfusion\(", text)),
                           "instructions": text.count("\n")}
  buffers = materialized_buffers(text)
  stats["written_buffers"] = len(buffers)
  stats["written_mib"] = round(sum(b["bytes"] for b in buffers) / 2**20, 1)
  # What each custom call's target writes (the fused kernels' share of the
  # step's bytes, beside the library calls').
  by_target: Dict[str, float] = {}
  for b in buffers:
    if b["target"]:
      by_target[b["target"]] = by_target.get(b["target"], 0) + b["bytes"]
  stats["custom_call_mib"] = {t: round(n / 2**20, 1)
                              for t, n in sorted(by_target.items())}
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
  return stats
