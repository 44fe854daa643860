r"""The attention analysis of a learning-rate sweep's runs, over seeds: the
entropy and adjacent-layer JSD of every run's final checkpoint, their mean
and spread over seeds per variant, and the verdicts of the residual-
attention study's rules (`tools/analysis/study_rules.py`, `docs/realformer.md`).

    python -m tools.analysis.attention_seeds --study_dir=study \
        --learning_rate=0.005 [--variants=post_ln,realformer] [--seeds=0,1,2,3,4] \
        [--output_dir=study/attention] [--batch_size=16]

For each variant and seed it reads `STUDY/runs/<variant>-lr<rate>-seed<s>`
(a run of `tools.analysis.compare_residual_attention --learning_rates`), writes
the run's `etc_config.json` from its operative config, and analyses every
checkpoint on all of the study's held-out examples
(`STUDY/data/eval-*.tfrecord`) with `tools.analysis.attention_analysis` (one
report, `attention_stats.json`, and its violin plots, in OUT). From that report,
per branch (long: l2l + l2g; global: g2g + g2l), it takes each run's statistic per
layer (entropy) and pair of adjacent layers (JSD): the mean over heads of each
head's median. OUT then receives `seeds.json` (every run's values, the
per-variant mean and sample sd, the Welch differences and the verdicts),
`seeds.md` (the same as tables) and `seeds.png` (mean +- sd over seeds per
layer, one panel per metric and branch).
"""

import argparse
import json
import os
import statistics
import sys
from typing import Any, Dict, List, Optional, Sequence

from tools.analysis import study_rules

METRICS = ("entropy", "jsd")
BRANCHES = ("long", "global")
REPORT = "seeds.json"
TABLES = "seeds.md"
PLOT = "seeds.png"


def run_dir(study_dir: str, variant: str, learning_rate: float,
            seed: int) -> str:
  """A sweep run's model dir (`compare_residual_attention.Run.name`)."""
  return os.path.join(study_dir, "runs",
                      f"{variant}-lr{learning_rate:g}-seed{seed}")


def write_config(model_dir: str) -> str:
  """`model_dir/etc_config.json` from the run's operative gin config."""
  from etc_realformer.config import EtcConfig  # pylint: disable=g-import-not-at-top
  from tools.analysis import compare_residual_attention as compare  # pylint: disable=g-import-not-at-top
  values = compare.model_config_of(model_dir)
  if not values:
    raise SystemExit(f"{model_dir}: no operative_config.gin (did the run "
                     "train?)")
  path = os.path.join(model_dir, "etc_config.json")
  EtcConfig(**values).to_json_file(path)
  return path


def _values(report: Dict[str, Any], labels: Dict[str, Dict[int, str]]
            ) -> Dict[str, Dict[str, Dict[str, List[List[float]]]]]:
  """variant -> metric -> branch -> per seed (in order), per layer."""
  return {variant: {metric: {branch: [
      study_rules.per_layer(report, label, branch, metric)
      for _, label in sorted(by_seed.items())] for branch in BRANCHES}
                    for metric in METRICS}
          for variant, by_seed in labels.items()}


def _mean_sd(values: Sequence[float]):
  return (statistics.fmean(values),
          statistics.stdev(values) if len(values) > 1 else 0.0)


def summarize(values, baseline: str, candidate: str) -> Dict[str, Any]:
  """Per metric and branch: each variant's mean and sd per layer, and the
  verdict (`study_rules.jsd_verdict` / `sparsity_verdict`) of `candidate`
  against `baseline`."""
  out: Dict[str, Any] = {}
  for metric in METRICS:
    for branch in BRANCHES:
      entry = {v: [list(_mean_sd(layer)) for layer in zip(*values[v][metric]
                                                           [branch])]
               for v in values}
      judge = (study_rules.jsd_verdict if metric == "jsd"
               else study_rules.sparsity_verdict)
      entry["verdict"] = judge(values[candidate][metric][branch],
                               values[baseline][metric][branch])
      out[f"{metric}/{branch}"] = entry
  return out


def tables(summary: Dict[str, Any], values, baseline: str, candidate: str
           ) -> str:
  """Markdown: per metric and branch, a row per layer (pair) with each
  variant's mean +- sd and the difference / resolvable difference."""
  lines = []
  for key, entry in summary.items():
    metric, branch = key.split("/")
    v = entry["verdict"]
    first = v.get("first_layer", 0)
    lines += [f"**{metric}, {branch} branch** ({candidate} - {baseline}; "
              f"verdict: {v['verdict']}, lower in {v['lower']}, higher in "
              f"{v['higher']} of {len(v['layers'])}"
              + (f" upper layers from {first}" if metric == "entropy" else "")
              + ")", "",
              f"| {'layers' if metric == 'jsd' else 'layer'} | {baseline} | "
              f"{candidate} | difference / resolvable |", "|---|---|---|---|"]
    for i, (b, c) in enumerate(zip(entry[baseline], entry[candidate])):
      name = f"{i}-{i + 1}" if metric == "jsd" else f"{i}"
      judged = [l for l in v["layers"] if l["layer"] + first == i]
      if judged and judged[0]["difference"] is not None:
        d = judged[0]
        cell = (f"{d['difference']:+.4f} / {d['resolvable']:.4f}" +
                ("*" if d["resolved"] else ""))
      else:
        cell = "-"
      lines.append(f"| {name} | {b[0]:.4f} +- {b[1]:.4f} | "
                   f"{c[0]:.4f} +- {c[1]:.4f} | {cell} |")
    lines.append("")
  n = {v: len(values[v]["jsd"]["long"]) for v in values}
  lines.append("(mean +- sample sd over seeds, " + ", ".join(
      f"{k}: {m}" for k, m in n.items()) + "; * = resolved by a Welch "
      "t-test at 95 %; the statistic of a run is the mean over heads of "
      "each head's median over held-out rows)")
  return "\n".join(lines) + "\n"


def plot(summary: Dict[str, Any], variants: Sequence[str], path: str
         ) -> None:
  """Mean +- sd over seeds per layer (pair): a panel per metric and branch."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(2, 2, figsize=(11, 7))
  for row, metric in enumerate(METRICS):
    for col, branch in enumerate(BRANCHES):
      ax = axes[row][col]
      entry = summary[f"{metric}/{branch}"]
      for i, variant in enumerate(variants):
        stats = entry[variant]
        x = [j + (i - (len(variants) - 1) / 2) * 0.08
             for j in range(len(stats))]
        ax.errorbar(x, [m for m, _ in stats], yerr=[s for _, s in stats],
                    marker="o", capsize=3, label=variant)
      ax.set_xticks(range(len(entry[variants[0]])))
      ax.set_xticklabels([f"{j}-{j + 1}" if metric == "jsd" else str(j)
                          for j in range(len(entry[variants[0]]))])
      ax.set(title=f"{metric}, {branch} branch ({entry['verdict']['verdict']})",
             xlabel="layers" if metric == "jsd" else "layer",
             ylabel=f"{metric} (nats)")
      ax.legend(fontsize=8)
  fig.suptitle("Attention over seeds: mean +- sd of each run's mean over "
               "heads of the head's median")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m tools.analysis.attention_seeds",
                              description=__doc__.split("\n")[0])
  a = p.add_argument
  a("--study_dir", required=True)
  a("--learning_rate", type=float, required=True)
  a("--variants", default="post_ln,realformer",
    help="baseline,candidate (the verdicts judge the second against the "
    "first)")
  a("--seeds", default="0,1,2,3,4")
  a("--output_dir", default=None, help="default STUDY/attention")
  a("--batch_size", type=int, default=16)
  a("--max_examples", type=int, default=0, help="<= 0: all held-out")
  a("--summarize_only", action="store_true",
    help="read OUT/attention_stats.json instead of analysing again")
  return p


def main(argv: Optional[List[str]] = None) -> int:
  args = build_parser().parse_args(argv)
  variants = [v for v in args.variants.split(",") if v]
  seeds = [int(s) for s in args.seeds.split(",") if s]
  if len(variants) != 2 or len(seeds) < 2:
    raise SystemExit("--variants: two (baseline,candidate); --seeds: two "
                     "or more")
  out = args.output_dir or os.path.join(args.study_dir, "attention")
  os.makedirs(out, exist_ok=True)
  labels = {v: {s: f"{v}-seed{s}" for s in seeds} for v in variants}
  stats_path = os.path.join(out, "attention_stats.json")
  if not args.summarize_only:
    from tools.analysis import attention_analysis  # pylint: disable=g-import-not-at-top
    dirs = [run_dir(args.study_dir, v, args.learning_rate, s)
            for v in variants for s in seeds]
    configs = [write_config(d) for d in dirs]
    attention_analysis.run_analysis(
        dirs, os.path.join(args.study_dir, "data", "eval-*.tfrecord"), out,
        labels=[labels[v][s] for v in variants for s in seeds],
        configs=configs, max_examples=args.max_examples,
        batch_size=args.batch_size)
  with open(stats_path, encoding="utf-8") as f:
    report = json.load(f)
  values = _values(report, labels)
  summary = summarize(values, variants[0], variants[1])
  with open(os.path.join(out, REPORT), "w", encoding="utf-8") as f:
    json.dump({"learning_rate": args.learning_rate, "seeds": seeds,
               "values": values, "summary": summary}, f, indent=2,
              sort_keys=True)
  text = tables(summary, values, variants[0], variants[1])
  with open(os.path.join(out, TABLES), "w", encoding="utf-8") as f:
    f.write(text)
  plot(summary, variants, os.path.join(out, PLOT))
  print(text, end="")
  return 0


if __name__ == "__main__":
  sys.exit(main())
