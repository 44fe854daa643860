"""Prints the GPU harness's JSON lines as one short table (the end of a
device run's output): kernel checks, kernel timings, modules, peers, and
each fused module's value against its twin's on the XLA path.

    python -m tools.gpu_summary OUT/kernels.jsonl OUT/xla_runs.jsonl ...
"""

import json
import os
import sys
from typing import List


def rows(path: str) -> List[dict]:
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def line(record: dict) -> str:
  kind = record.get("record_type")
  if kind == "kernel_check":
    grad = record.get("grad_relative_error")
    grads = "" if grad is None else f" grad_err={grad:.2e}"
    return (f"check  {record['kernel']} {record['dtype']:9s} ids="
            f"{record['has_ids']!s:5s} ctx_err={record['ctx_relative_error']:.2e}"
            f" lse_err={record['lse_relative_error']:.2e}{grads} "
            f"ok={record['ok']}")
  if kind == "kernel_timing":
    tiles = (record.get("cubins") or {}).get("tiles") or {}
    # Per kernel (a label "side_forward[long,...]" names its kernel first).
    kernel = record["kernel"].split("[")[0]
    tiles = tiles.get(kernel, tiles)
    tag = ",".join(f"{k}={v}" for k, v in tiles.items()
                   if not isinstance(v, dict))
    return (f"kernel [{tag}] {record['kernel']} {record['dtype']} "
            f"ids={record.get('has_ids', True)} B={record['batch']} "
            f"L={record['long_len']} G={record['global_len']}: "
            f"{1e3 * record['median_s']:.3f} ms, "
            f"{record['achieved_gb_per_s']:.0f} GB/s of the floor bytes, "
            f"{record['achieved_tflop_per_s']:.1f} TFLOP/s")
  if kind == "xla_run":
    name = os.path.basename(os.path.normpath(record["module_dir"]))
    return (f"module {name}: {1e3 * record['median_s']:.2f} ms "
            f"(min {1e3 * record['min_s']:.2f}), "
            f"{record.get('peak_memory_gib', 0):.2f} GiB, value "
            f"{record['value']:.6g}")
  if kind == "gpu_peer":
    if record.get("status") != "ok":
      return f"peer   {record['model']} {record['pass']}: {record.get('error')}"
    return (f"peer   {record['model']} {record['pass']} L={record['long_len']} "
            f"B={record['batch_size']}: {1e3 * record['median_s']:.2f} ms, "
            f"{record.get('peak_memory_gib', 0):.2f} GiB")
  return json.dumps(record)[:200]


def fused_agreement(records: List[dict]) -> List[str]:
  """Per module exported with `attention_kernel='fused'` and its twin
  without (same spec, weights drawn alike): how far their values differ,
  the fused kernels' correctness on the card inside the whole step."""
  values = {}
  for record in records:
    if record.get("record_type") == "xla_run":
      name = os.path.basename(os.path.normpath(record["module_dir"]))
      values[name] = record["value"]
  out = []
  for name, value in sorted(values.items()):
    twin = name.replace("-fused", "", 1)
    if twin != name and twin in values:
      scale = max(abs(values[twin]), 1e-30)
      out.append(f"fused  {name}: value {value:.6g} against {values[twin]:.6g}"
                 f" ({abs(value - values[twin]) / scale:.1e} relative)")
  return out


def main(argv: List[str]) -> int:
  records = [record for path in argv for record in rows(path)]
  for record in records:
    print(line(record))
  for text in fused_agreement(records):
    print(text)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
