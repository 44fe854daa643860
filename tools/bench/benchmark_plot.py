"""Plots and log-log slopes of `tools.bench.benchmark` records.

    python -m tools.bench.benchmark_plot --input=bench.jsonl --plot=bench.png \
        [--label=TEXT[,TEXT...]]

`tools.bench.benchmark` calls `plot` and `slope_summary` on the records of its
own sweep; this command does the same for a whole JSONL file (for example the
record run, appended over several invocations). Only `status == 'ok'` encoder
records are plotted.
"""

import argparse
import collections
import json
import math
from typing import Any, Dict, Iterable, List, Optional, Tuple

Record = Dict[str, Any]
# The target: with G fixed, time grows at most like L^1.1 from 2048 to
# 16384 (linear attention cost plus some overhead).
SLOPE_RANGE = (2048, 16384)


def _series(records: Iterable[Record]
            ) -> Dict[Tuple[str, str], List[Record]]:
  """(variant, pass) -> ok encoder records sorted by L (last one per L)."""
  by_key: Dict[Tuple[str, str], Dict[int, Record]] = (
      collections.defaultdict(dict))
  for r in records:
    if r.get("record_type") == "encoder" and r.get("status") == "ok":
      by_key[(r["variant"], r["pass"])][r["long_len"]] = r
  return {k: [v[length] for length in sorted(v)]
          for k, v in sorted(by_key.items())}


def _slope(x0: float, y0: Optional[float], x1: float,
           y1: Optional[float]) -> Optional[float]:
  if not y0 or not y1 or y0 <= 0 or y1 <= 0 or x0 == x1:
    return None
  return math.log(y1 / y0) / math.log(x1 / x0)


def slopes(records: Iterable[Record]) -> List[Dict[str, Any]]:
  """Log-log slopes between consecutive lengths, per (variant, pass).

  `mem_slope` uses the peak RSS as recorded (baseline included, so it
  understates the growth of activations); `act_mem_slope` uses peak minus the
  post-build baseline.
  """
  out = []
  for (variant, pass_), series in _series(records).items():
    for a, b in zip(series, series[1:]):
      def act(r):
        if r.get("peak_rss_gib") is None or r.get("baseline_rss_gib") is None:
          return None
        return r["peak_rss_gib"] - r["baseline_rss_gib"]
      out.append({
          "variant": variant, "pass": pass_, "from_len": a["long_len"],
          "to_len": b["long_len"],
          "time_slope": _slope(a["long_len"], a.get("median_s"),
                               b["long_len"], b.get("median_s")),
          "mem_slope": _slope(a["long_len"], a.get("peak_rss_gib"),
                              b["long_len"], b.get("peak_rss_gib")),
          "act_mem_slope": _slope(a["long_len"], act(a), b["long_len"],
                                  act(b))})
  return out


def _fmt(x: Optional[float]) -> str:
  return "  -  " if x is None else f"{x:5.2f}"


def slope_summary(records: Iterable[Record], target: float = 1.1) -> str:
  """Text: slopes per variant, and the 2048->16384 check when G is fixed."""
  records = list(records)
  lines = ["# log-log slopes (d log y / d log L) between consecutive lengths:",
           f"# {'variant':<34} {'pass':<10} {'L range':>13}  time   mem   "
           "act_mem"]
  for s in slopes(records):
    lines.append(f"# {s['variant']:<34} {s['pass']:<10} "
                 f"{s['from_len']:>6}-{s['to_len']:<6} {_fmt(s['time_slope'])}"
                 f" {_fmt(s['mem_slope'])} {_fmt(s['act_mem_slope'])}")
  if len(lines) == 2:
    lines.append("# (fewer than two successful lengths per variant)")
  lo, hi = SLOPE_RANGE
  for (variant, pass_), series in _series(records).items():
    fixed_g = not str(series[0].get("global_len_mode", "")).startswith("L/")
    by_len = {r["long_len"]: r for r in series}
    if lo in by_len and hi in by_len:
      s = _slope(lo, by_len[lo].get("median_s"), hi, by_len[hi].get("median_s"))
      if s is None:
        continue
      verdict = ((" PASS" if s <= target else " FAIL") +
                 f" (target <= {target:g} with G fixed)" if fixed_g
                 else " (G grows with L: no target)")
      lines.append(f"# time slope {lo}->{hi} {variant} {pass_}: {s:.3f}"
                   f"{verdict}")
  return "\n".join(lines)


def plot(records: Iterable[Record], path: str, title: str = "") -> None:
  """Time (median) and peak RSS against L, log-log, one line per variant."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  series = _series(records)
  fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(16, 6))
  # One colour per line: the default cycle has 10 colours, and a record run
  # has more lines than that (two lines sharing a colour read as one).
  colours = plt.get_cmap("tab20").colors
  for k, ((variant, pass_), rs) in enumerate(series.items()):
    xs = [r["long_len"] for r in rs]
    style = "-o" if pass_ == "fwd" else "--s"
    colour = colours[k % len(colours)]
    ax_t.plot(xs, [r["median_s"] for r in rs], style, color=colour,
              label=f"{variant} {pass_}")
    ax_m.plot(xs, [r["peak_rss_gib"] for r in rs], style, color=colour,
              label=f"{variant} {pass_}")
  lengths = sorted({r["long_len"] for rs in series.values() for r in rs})
  for ax, ylabel in ((ax_t, "median time per call (s)"),
                     (ax_m, "peak RSS, VmHWM (GiB)")):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if lengths:  # Label the measured lengths, not powers of 2.
      ax.set_xticks(lengths, [str(n) for n in lengths])
      ax.minorticks_off()
    ax.set_xlabel("long length L")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
  if series:
    # Beside the axes, so that no line is hidden behind it.
    fig.legend(*ax_t.get_legend_handles_labels(), loc="center right",
               fontsize=7)
  else:
    ax_t.text(0.5, 0.5, "no successful measurements", ha="center",
              transform=ax_t.transAxes)
  fig.suptitle(title or "ETC-RealFormer encoder: fwd (solid) and fwd+bwd "
               "(dashed)")
  fig.tight_layout(rect=(0, 0, 0.74 if series else 1, 1))
  fig.savefig(path, dpi=110)
  plt.close(fig)


def read_jsonl(path: str) -> List[Record]:
  with open(path, "r") as f:
    return [json.loads(line) for line in f if line.strip()]


def main(argv: Optional[List[str]] = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m tools.bench.benchmark_plot")
  parser.add_argument("--input", required=True, help="JSONL of records")
  parser.add_argument("--plot", default=None, help="PNG to write")
  parser.add_argument("--label", default=None,
                      help="only records with this label (a comma list: "
                      "any of these labels)")
  parser.add_argument("--slope_target", type=float, default=1.1)
  args = parser.parse_args(argv)
  records = read_jsonl(args.input)
  if args.label is not None:
    labels = set(args.label.split(","))
    records = [r for r in records if r.get("label") in labels]
  print(slope_summary(records, args.slope_target))
  if args.plot:
    plot(records, args.plot)
    print(f"# plot: {args.plot}")


if __name__ == "__main__":
  main()
