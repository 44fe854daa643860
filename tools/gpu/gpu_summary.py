"""Prints the GPU harness's JSON lines as one short table (the end of a
device run's output): kernel checks, kernel timings, modules, peers, the
steps the run skipped; then the fastest tiles of each kernel timing the
tile sweep measured, today's beside them; each kernel timing against its
issue floor (`tools.kernels.kernel_sass`'s kernel_floor records, which
tools/gpu/gpu_prepare.sh leaves in the kernels' folder); each fused module's
value against its twin's on the XLA path; and where the modules stand against
the goals of record.

    python -m tools.gpu.gpu_summary OUT/kernels.jsonl OUT/xla_runs.jsonl ...
"""

import dataclasses
import json
import os
import sys
from typing import Dict, List, Optional

from tools.kernels import kernel_grids


def rows(path: str) -> List[dict]:
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def line(record: dict) -> str:
  kind = record.get("record_type")
  if kind in ("kernel_check", "kernel_timing") and "error" in record:
    what = record.get("kernel") or (
        f"{record.get('branch')} branch, streams and dropout "
        f"{record.get('streams_and_dropout')}, sources "
        f"{record.get('num_sources')}")
    return f"{kind.split('_')[1]:6s} {what}: FAILED {record['error']}"
  if kind == "kernel_check":
    grad = record.get("grad_relative_error")
    grads = "" if grad is None else f" grad_err={grad:.2e}"
    return (f"check  {record['kernel']} {record['dtype']:9s} ids="
            f"{record['has_ids']!s:5s} ctx_err={record['ctx_relative_error']:.2e}"
            f" lse_err={record['lse_relative_error']:.2e}{grads} "
            f"ok={record['ok']}")
  if kind == "kernel_timing":
    tiles = (record.get("cubins") or {}).get("tiles") or {}
    # Per kernel (a label "branch_forward[long,...]" names its kernel first).
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
    peak = record.get("peak_memory_gib")
    peak = "no peak read" if peak is None else f"{peak:.2f} GiB"
    text = (f"module {name}: {1e3 * record['median_s']:.2f} ms "
            f"(min {1e3 * record['min_s']:.2f}), {peak}, value "
            f"{record['value']:.6g}")
    stats = record.get("hlo_stats") or {}
    if "written_mib" in stats:
      # What the step writes outside fusions, and the fused kernels' share.
      kernels = sum(mib for target, mib in
                    (stats.get("custom_call_mib") or {}).items()
                    if target.startswith("etc_branch"))
      text += f", writes {stats['written_mib'] / 1024:.1f} GiB"
      if kernels:
        text += f" ({kernels / 1024:.1f} GiB by the kernels)"
    return text
  if kind == "gpu_peer":
    if record.get("status") != "ok":
      return f"peer   {record['model']} {record['pass']}: {record.get('error')}"
    return (f"peer   {record['model']} {record['pass']} L={record['long_len']} "
            f"B={record['batch_size']}: {1e3 * record['median_s']:.2f} ms, "
            f"{record.get('peak_memory_gib', 0):.2f} GiB")
  if kind == "step":
    if record.get("skipped"):
      why = ("as asked (SKIP_STEPS)" if record.get("asked")
             else "the run's budget was spent")
      return f"step   {record['step']}: skipped, {why}"
    return (f"step   {record['step']}: {record['seconds']} s, exit "
            f"{record['exit']} (limit {record['limit_s']} s)")
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


# The kernels each timed pass launches (`gpu_kernel_check.TIMED`).
PASS_KERNELS = {"fwd": ("branch_forward",),
                "bwd": ("branch_backward_queries", "branch_backward_keys"),
                "fwd_bwd": ("branch_forward", "branch_backward_queries",
                            "branch_backward_keys")}


def _tile_tag(record: dict) -> Optional[str]:
  """The tiles of the kernels a timing launched, as
  block_m x block_n x warps per kernel ("32x64x4/32x32x4/32x64x4"), and
  "r" and the cap where the build capped each thread's registers
  ("32x64x4r168")."""
  tiles = (record.get("cubins") or {}).get("tiles") or {}
  kernels = PASS_KERNELS.get(record.get("pass", ""), ())
  if not kernels or not all(isinstance(tiles.get(k), dict) for k in kernels):
    return None
  return "/".join(f"{tiles[k]['block_m']}x{tiles[k]['block_n']}x"
                  f"{tiles[k]['num_warps']}" +
                  (f"r{tiles[k]['maxnreg']}" if tiles[k].get("maxnreg")
                   else "") for k in kernels)


def tile_lines(records: List[dict], today: Dict[str, dict]) -> List[str]:
  """Per timed call measured with more than one build of tiles (the
  default build's timings and the sweep's, TILE_DIRS): the fastest tiles,
  and today's (`triton_attention.TILES`) against them."""
  groups: Dict[tuple, Dict[str, float]] = {}
  for record in records:
    tag = _tile_tag(record)
    if record.get("record_type") != "kernel_timing" or tag is None:
      continue
    key = (record["kernel"], record["pass"], record["dtype"],
           record.get("has_ids", True), record.get("batch"),
           record.get("long_len"), record.get("global_len"))
    times = groups.setdefault(key, {})
    times[tag] = min(times.get(tag, float("inf")), record["median_s"])
  out = []
  for (kernel, pass_, dtype, *_), times in sorted(groups.items()):
    if len(times) < 2:
      continue
    fastest = min(times, key=times.get)
    text = (f"tiles  {kernel} {dtype}: fastest {fastest} "
            f"{1e3 * times[fastest]:.3f} ms")
    mine = _tile_tag({"pass": pass_, "cubins": {"tiles": today}})
    if mine == fastest:
      text += " (today's)"
    elif mine in times:
      text += (f"; today's {mine} {1e3 * times[mine]:.3f} ms "
               f"({times[mine] / times[fastest]:.2f}x)")
    out.append(text)
  return out


def floor_lines(records: List[dict]) -> List[str]:
  """Per kernel timing whose cubins all have a floor at its shape
  (`tools.kernels.kernel_sass`: its warp instructions at the issue rate): the
  time against the sum of its launches' floors."""
  floors = {}
  for r in records:
    if r.get("record_type") == "kernel_floor":
      floors[r["variant"], r["batch"], r["long_len"], r["global_len"],
             r.get("num_heads")] = r["floor_ms"]
  out = []
  for r in records:
    if r.get("record_type") != "kernel_timing" or "error" in r:
      continue
    keys = [(v, r.get("batch"), r.get("long_len"), r.get("global_len"),
             r.get("num_heads")) for v in r.get("variants") or ()]
    if not keys or not all(k in floors for k in keys):
      continue
    floor = sum(floors[k] for k in keys)
    ms = 1e3 * r["median_s"]
    out.append(f"floor  {r['kernel']} {r['dtype']} {r['pass']}: {ms:.3f} "
               f"ms, issue floor {floor:.3f} ms ({ms / floor:.1f}x)")
  return out


@dataclasses.dataclass(frozen=True)
class Goal:
  """One goal of record (docs/benchmarks.md, "GPU"): the 12-layer base
  step in mixed bfloat16, residual attention on, no checkpointing; fwd_bwd
  with dropout 0.1 against dense SDPA's step in the same run, fwd (eval)
  against the milliseconds an H100 should take, and against this run's
  XLA-path module as the H100 ratio of those milliseconds to 41.1."""
  pass_: str
  long_len: int
  global_len: int
  batch: int
  max_ratio_to_dense: Optional[float] = None
  max_gib: Optional[float] = None
  max_h100_ms: Optional[float] = None
  h100_xla_ms: Optional[float] = None


GOALS = (
    Goal("fwd_bwd", 4096, 256, 4, max_ratio_to_dense=0.8, max_gib=8),
    Goal("fwd_bwd", 16384, 1024, 1, max_ratio_to_dense=0.85, max_gib=12),
    Goal("fwd_bwd", 16384, 256, 1, max_ratio_to_dense=0.6, max_gib=8),
    Goal("fwd", 4096, 256, 4, max_h100_ms=22, h100_xla_ms=41.1),
)


def _within_spec(spec: dict, goal: Goal) -> bool:
  """Whether a module's spec is the goal's benchmark: a goal met by turning
  residual attention off or by checkpointing does not count."""
  config = spec.get("etc_config", {})
  execution = spec.get("execution", {})
  return (spec.get("pass") == goal.pass_
          and spec.get("long_len") == goal.long_len
          and spec.get("global_len") == goal.global_len
          and spec.get("batch_size") == goal.batch
          and spec.get("dtype") == "mixed_bfloat16"
          and config.get("num_hidden_layers") == 12
          and config.get("hidden_size") == 768
          and bool(config.get("residual_attention"))
          and not config.get("grad_checkpointing_period")
          and not execution.get("recompute_attention"))


def _label(spec: dict) -> str:
  execution = spec.get("execution", {})
  label = execution.get("attention_kernel", "xla")
  if execution.get("recompute_residual_streams"):
    label += ", recomputed streams"
  elif execution.get("stream_dtype", "float32") != "float32":
    label += f", {execution['stream_dtype']} streams"
  return label


def _verdict(value: float, limit: float) -> str:
  return "met" if value <= limit else "not met"


def goal_lines(records: List[dict]) -> List[str]:
  """Per goal, each module run at its spec: time against dense SDPA's (or
  the H100's milliseconds) and peak memory, each with its verdict; a goal
  with no module run says so."""
  runs = [r for r in records if r.get("record_type") == "xla_run"
          and "kernel_profile" not in r and "median_s" in r]
  peers = [r for r in records if r.get("record_type") == "gpu_peer"
           and r.get("status") == "ok" and r.get("model") == "bert_sdpa"]
  out = []
  for goal in GOALS:
    shape = f"{goal.pass_} {goal.long_len}/{goal.global_len}/{goal.batch}"
    mine = [r for r in runs if _within_spec(r.get("spec", {}), goal)]
    if not mine:
      out.append(f"goal   {shape}: no module run at this spec")
      continue
    dense = [p["median_s"] for p in peers
             if p.get("pass") == goal.pass_ and p.get("long_len") ==
             goal.long_len and p.get("batch_size") == goal.batch]
    xla = [r for r in mine
           if r["spec"].get("execution", {}).get("attention_kernel",
                                                 "xla") == "xla"]
    for r in mine:
      ms = 1e3 * r["median_s"]
      parts = [f"{ms:.2f} ms"]
      if goal.max_ratio_to_dense is not None:
        if dense:
          ratio = r["median_s"] / dense[0]
          parts.append(
              f"{ratio:.2f}x dense SDPA ({1e3 * dense[0]:.2f} ms; goal <= "
              f"{goal.max_ratio_to_dense}x: "
              f"{_verdict(ratio, goal.max_ratio_to_dense)})")
        else:
          parts.append("no dense SDPA run at this shape")
      if goal.max_h100_ms is not None:
        parts.append(f"goal <= {goal.max_h100_ms} ms on an H100: "
                     f"{_verdict(ms, goal.max_h100_ms)} on this card")
        if xla and r is not xla[0]:
          ratio = r["median_s"] / xla[0]["median_s"]
          limit = goal.max_h100_ms / goal.h100_xla_ms
          parts.append(f"{ratio:.2f}x this run's XLA module (goal <= "
                       f"{limit:.2f}x: {_verdict(ratio, limit)})")
      if goal.max_gib is not None:
        gib = r.get("peak_memory_gib")
        parts.append("no peak read" if gib is None else
                     f"{gib:.2f} GiB (goal <= {goal.max_gib}: "
                     f"{_verdict(gib, goal.max_gib)})")
      out.append(f"goal   {shape} [{_label(r['spec'])}]: " + ", ".join(parts))
  return out


def main(argv: List[str]) -> int:
  records = [record for path in argv for record in rows(path)]
  for record in records:
    if record.get("record_type") != "kernel_floor":  # in floor_lines
      print(line(record))
  try:
    today = kernel_grids.tiles()
  except (OSError, ValueError):  # a partial copy of the checkout
    today = {}
  for text in (tile_lines(records, today) + floor_lines(records) +
               fused_agreement(records) + goal_lines(records)):
    print(text)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
