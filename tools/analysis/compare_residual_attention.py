r"""Does residual attention help? Pre-trains variants of the same model under
the same budget, data and seeds, and compares them, as the RealFormer paper
compared Post-LN, Pre-LN and RealFormer.

    python -m tools.analysis.compare_residual_attention --output_dir=study \
        [--variants=post_ln,pre_ln,realformer,running_mean,no_l2l_stream,...]
        [--seeds=0,1,2] [--lr_multipliers=1,2] \
        [--lr_variants=post_ln,pre_ln,realformer] [--train_steps=600] \
        [--eval_every=200] [--jobs=1] [--data_dir=DIR] [--quick] \
        [--gin_file=strategies/mirrored.gin --gin_bindings=...]

Variants (`VARIANTS`): `post_ln` (BERT's and ETC's order, no residual
attention), `pre_ln` (LayerNorm before each sublayer), `realformer`
(Post-LN + residual attention on the four ETC patterns), `running_mean`
(RealFormer with the running-mean stream) and `no_<pattern>_stream`
(RealFormer with one pattern's stream switched off: l2l, l2g, g2g or g2l).
Every variant runs with every seed at the base learning rate; the
`--lr_variants` also run at each `--lr_multipliers` x the base (the
stability axis).

The base configuration is the pre-training demo's (`demos.pretrain.demo`:
the embedded corpus, its vocabulary, the tiny ETC-RealFormer, LAMB) with
`--train_steps` steps and an evaluation on the held-out documents every
`--eval_every` steps; --data_dir points at other data preprocessed by
`python -m tasks.pretrain.preprocess` (its `vocab.txt` and stats beside the
TFRecords), and --gin_file / --gin_bindings (applied after the base, to
every run) change the model size, the strategy (mirrored, multi-worker,
TPU) or the precision, so the same comparison runs at scale.

Each run is an independent `python -m tasks.run` process in
OUT/runs/<run>/ (its log, checkpoints, `eval_results.json` and the
histories its training writes: `train_history.jsonl`,
`eval_history.jsonl`). A finished run appends one JSON line to
OUT/runs.jsonl: `variant`, `seed`, `learning_rate`, `lr_multiplier`,
`steps`, `mlm_accuracy`, `mlm_loss`, `cpc_accuracy`, `cpc_loss`, `diverged`
(a non-finite loss or metric, or a failed process), the training-loss and
evaluation curves (from the histories), the wall time, the bindings and the
command. The tool is resumable: runs already in
runs.jsonl are skipped, and an interrupted run continues from its last
checkpoint. At the end (and with --summarize_only) it writes OUT/table.md
(mean +- sample standard deviation over seeds per variant and learning
rate, diverged runs counted apart) and OUT/curves.png (training loss and
held-out MLM accuracy against steps, mean with a +-1 sd band per variant).

--quick: a tiny model, 24 documents, 6 steps (a check that everything runs,
used by the tests; the numbers mean nothing).
"""

import argparse
import ast
import dataclasses
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from concurrent import futures
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tools.analysis import study_rules

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
RECORDS_FILE = "runs.jsonl"
TABLE_FILE = "table.md"
PLOT_FILE = "curves.png"
BASELINE_FILE = "baseline.json"
STABILITY_FILE = "stability.md"
RATE_PLOT_FILE = "loss_vs_rate.png"
VERDICT_FILE = "verdicts.json"
METRICS = ("mlm_accuracy", "mlm_loss", "cpc_accuracy", "cpc_loss")

_ALL_PATTERNS = ("l2l", "l2g", "g2g", "g2l")


def _without(pattern: str) -> List[str]:
  kept = ", ".join(f"'{p}'" for p in _ALL_PATTERNS if p != pattern)
  return ["etc_config.residual_attention = True",
          "etc_config.residual_running_mean = False",
          f"etc_config.residual_patterns = ({kept},)"]


# Variant -> the gin bindings that make it (over the base configuration).
_POST_LN = ["etc_config.use_pre_activation_order = False"]
VARIANTS: Dict[str, List[str]] = {
    "post_ln": _POST_LN + ["etc_config.residual_attention = False"],
    "pre_ln": ["etc_config.use_pre_activation_order = True",
               "etc_config.residual_attention = False"],
    "realformer": _POST_LN + ["etc_config.residual_attention = True",
                              "etc_config.residual_running_mean = False"],
    "running_mean": _POST_LN + ["etc_config.residual_attention = True",
                                "etc_config.residual_running_mean = True"],
}
VARIANTS.update({f"no_{p}_stream": _POST_LN + _without(p)
                 for p in _ALL_PATTERNS})
LR_VARIANTS = ("post_ln", "pre_ln", "realformer")

# --quick: a model small enough for a test.
QUICK_BINDINGS = [
    "etc_config.hidden_size = 32", "etc_config.intermediate_size = 64",
    "etc_config.num_hidden_layers = 2", "etc_config.num_attention_heads = 2",
    "TrainerConfig.train_batch_size = 4", "TrainerConfig.eval_batch_size = 16",
    "TrainerConfig.jit_compile = False", "optimizer.warmup_steps = 0",
]
QUICK_DOCUMENTS = 24
QUICK_STEPS = 6


@dataclasses.dataclass(frozen=True)
class Run:
  """One pre-training run of the comparison."""
  variant: str
  seed: int
  lr_multiplier: float
  learning_rate: float
  # Named by the learning rate itself (--learning_rates) rather than by
  # its multiple of the demo's.
  by_rate: bool = False

  @property
  def name(self) -> str:
    if self.by_rate:
      return f"{self.variant}-lr{self.learning_rate:g}-seed{self.seed}"
    return f"{self.variant}-lr{self.lr_multiplier:g}x-seed{self.seed}"


def plan_runs(variants: Sequence[str], seeds: Sequence[int],
              lr_multipliers: Sequence[float], lr_variants: Sequence[str],
              base_learning_rate: float) -> List[Run]:
  """Every variant at every seed at the base learning rate, then the
  `lr_variants` at the other multipliers; seeds innermost-last so that a
  partial study has every variant once before any twice."""
  runs = []
  for seed in seeds:
    for multiplier in sorted(set([1.0] + list(lr_multipliers))):
      for variant in variants:
        if multiplier != 1.0 and variant not in lr_variants:
          continue
        runs.append(Run(variant, seed, multiplier,
                        base_learning_rate * multiplier))
  return runs


def plan_rate_runs(variants: Sequence[str], seeds: Sequence[int],
                   learning_rates: Sequence[float],
                   base_learning_rate: float) -> List[Run]:
  """Every variant at every seed and learning rate (a sweep), seeds
  outermost so that a partial sweep has every (variant, rate) once before
  any twice."""
  return [Run(variant, seed, lr / base_learning_rate, lr, by_rate=True)
          for seed in seeds for lr in sorted(set(learning_rates))
          for variant in variants]


def read_records(path: str) -> List[Dict[str, Any]]:
  """The records of runs.jsonl (a half-written last line, left by a kill,
  is ignored)."""
  if not os.path.exists(path):
    return []
  out = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      try:
        out.append(json.loads(line))
      except json.JSONDecodeError:
        continue
  return out


def append_record(path: str, record: Dict[str, Any]) -> None:
  """Appends one JSON line, on a line of its own even after a half-written
  one."""
  with open(path, "a+", encoding="utf-8") as f:
    f.seek(0, os.SEEK_END)
    if f.tell():
      f.seek(f.tell() - 1)
      if f.read(1) != "\n":
        f.write("\n")
    f.write(json.dumps(record, sort_keys=True) + "\n")
    f.flush()


def pending(runs: Sequence[Run], records: Sequence[Dict[str, Any]]
            ) -> List[Run]:
  """The runs without a record yet."""
  done = {r.get("run") for r in records}
  return [r for r in runs if r.name not in done]


# --------------------------------------------------------------- one run
def read_curves(model_dir: str
                ) -> Tuple[List[List[Optional[float]]], List[Dict[str, Any]]]:
  """(training-loss curve [[step, loss]], evaluations [{step, metrics}])
  from the histories the run's training wrote into its model dir
  (`experiment.TRAIN_HISTORY_FILE`, `EVAL_HISTORY_FILE`); a loss or metric
  that was not finite is None."""
  from etc_realformer.training import experiment  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import trainer  # pylint: disable=g-import-not-at-top
  train = [[r["step"], r["metrics"].get("loss")] for r in trainer.read_history(
      os.path.join(model_dir, experiment.TRAIN_HISTORY_FILE))]
  evals = [{"step": r["step"],
            **{k: r["metrics"][k] for k in METRICS if k in r["metrics"]}}
           for r in trainer.read_history(
               os.path.join(model_dir, experiment.EVAL_HISTORY_FILE))]
  return train, evals


def _finite(x: Any) -> bool:
  return isinstance(x, (int, float)) and math.isfinite(x)


def make_record(run: Run, returncode: int,
                curves: Tuple[List[List[Optional[float]]],
                              List[Dict[str, Any]]],
                final: Optional[Dict[str, Any]], steps: int,
                bindings: Sequence[str], command: Sequence[str],
                wall_s: float, num_layers: Optional[int] = None,
                baseline_loss: Optional[float] = None) -> Dict[str, Any]:
  """The JSON line of a finished (or failed) run, from its curves
  (`read_curves`) and final evaluation (`eval_results.json`).

  `diverged`: the process failed or a loss or metric was not finite.
  `failed` / `failure`: the study's rules (`study_rules.failure`, judged
  against `baseline_loss`, the unigram baseline), which include
  divergence.
  """
  train, evals = curves
  final = final or {}
  metrics = {k: final.get(k) for k in METRICS}
  diverged = (returncode != 0 or
              any(not _finite(loss) for _, loss in train) or
              not all(_finite(v) for v in metrics.values()))
  reason = study_rules.failure(returncode, train, evals, final,
                               baseline_loss)
  return {"run": run.name, "variant": run.variant, "seed": run.seed,
          "learning_rate": run.learning_rate,
          "lr_multiplier": run.lr_multiplier, "num_layers": num_layers,
          "steps": final.get("step", train[-1][0] if train else 0),
          "planned_steps": steps, **metrics, "diverged": diverged,
          "failed": reason is not None, "failure": reason,
          "mlm_unigram_baseline": baseline_loss,
          "returncode": returncode, "train_curve": train,
          "eval_curve": evals, "wall_s": round(wall_s, 1),
          "bindings": list(bindings), "command": " ".join(
              shlex.quote(c) for c in command)}


def model_config_of(model_dir: str) -> Dict[str, Any]:
  """The `etc_config.*` values of a run's operative config (the fields
  gin set; the rest are `EtcConfig`'s defaults)."""
  path = os.path.join(model_dir, "operative_config.gin")
  if not os.path.exists(path):
    return {}
  out = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      m = re.match(r"etc_config\.(\w+) = (.+)$", line.strip())
      if m and m.group(1) != "config_file":
        out[m.group(1)] = ast.literal_eval(m.group(2))
  return out


def execute(run: Run, out_dir: str, base_gin: str, user_gin: Sequence[str],
            user_bindings: Sequence[str], steps: int,
            baseline_loss: Optional[float] = None) -> Dict[str, Any]:
  """Runs (or resumes) one run in its own process; returns its record."""
  model_dir = os.path.join(out_dir, "runs", run.name)
  os.makedirs(model_dir, exist_ok=True)
  bindings = (VARIANTS[run.variant] +
              [f"optimizer.learning_rate = {run.learning_rate!r}",
               f"PretrainTask.seed = {run.seed}",
               f"TrainerConfig.train_steps = {steps}"] + list(user_bindings))
  command = ([sys.executable, "-m", "tasks.run", f"--gin_file={base_gin}"] +
             [f"--gin_file={g}" for g in user_gin] +
             [f"--gin_bindings={b}" for b in bindings] +
             ["--mode=train_and_eval", f"--model_dir={model_dir}"])
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
      [REPO] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                else [])))
  log_path = os.path.join(model_dir, "log.txt")
  start = time.time()
  # Appended: a resumed run's log holds its earlier part too.
  with open(log_path, "a", encoding="utf-8") as log:
    proc = subprocess.run(command, cwd=REPO, env=env, stdout=log,
                          stderr=subprocess.STDOUT, check=False)
  final = None
  results = os.path.join(model_dir, "eval_results.json")
  if proc.returncode == 0 and os.path.exists(results):
    with open(results, encoding="utf-8") as f:
      final = json.load(f)
  return make_record(run, proc.returncode, read_curves(model_dir), final,
                     steps, bindings, command, time.time() - start,
                     num_layers=model_config_of(model_dir).get(
                         "num_hidden_layers"),
                     baseline_loss=baseline_loss)


# ----------------------------------------------------------------- summary
def _mean_sd(values: Sequence[float]) -> Tuple[float, float]:
  if not values:
    return float("nan"), float("nan")
  sd = statistics.stdev(values) if len(values) > 1 else 0.0
  return statistics.fmean(values), sd


def summarize(records: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
  """Per (variant, learning rate): runs, diverged runs, and mean / sd of
  each metric over the runs that did not diverge."""
  groups: Dict[Tuple[str, float], List[Dict[str, Any]]] = {}
  for r in records:
    groups.setdefault((r["variant"], r["learning_rate"]), []).append(r)
  order = {v: i for i, v in enumerate(VARIANTS)}
  rows = []
  for (variant, lr), rs in sorted(groups.items(), key=lambda kv: (
      order.get(kv[0][0], len(order)), kv[0][0], kv[0][1])):
    ok = [r for r in rs if not r["diverged"]]
    row = {"variant": variant, "learning_rate": lr, "runs": len(rs),
           "diverged": len(rs) - len(ok),
           "seeds": sorted(r["seed"] for r in ok)}
    for m in METRICS:
      row[m], row[m + "_sd"] = _mean_sd([r[m] for r in ok])
    rows.append(row)
  return rows


def table(rows: Sequence[Dict[str, Any]]) -> str:
  """A Markdown table of `summarize`'s rows (mean +- sd over seeds)."""
  lines = ["| variant | learning rate | runs (diverged) | MLM accuracy | "
           "MLM loss | CPC accuracy | CPC loss |",
           "|---|---|---|---|---|---|---|"]
  for r in rows:
    cells = []
    for m in METRICS:
      if math.isnan(r[m]):
        cells.append("-")
      else:
        digits = 4 if "accuracy" in m else 3
        cells.append(f"{r[m]:.{digits}f} +- {r[m + '_sd']:.{digits}f}")
    lines.append(f"| {r['variant']} | {r['learning_rate']:g} | {r['runs']} "
                 f"({r['diverged']}) | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def _band(curves: Sequence[Sequence[Tuple[int, float]]]):
  """Steps present in every curve, with the mean and sd across curves."""
  by_step: Dict[int, List[float]] = {}
  for curve in curves:
    for step, value in curve:
      if _finite(value):
        by_step.setdefault(step, []).append(value)
  steps = sorted(s for s, v in by_step.items() if len(v) == len(curves))
  stats = [_mean_sd(by_step[s]) for s in steps]
  return steps, [m for m, _ in stats], [sd for _, sd in stats]


def plot(records: Sequence[Dict[str, Any]], path: str) -> None:
  """Training loss and held-out MLM accuracy against steps: the mean over
  seeds with a +-1 sd band, one line per variant and learning rate."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
  groups: Dict[str, List[Dict[str, Any]]] = {}
  for r in records:
    if not r["diverged"]:
      groups.setdefault(f"{r['variant']} lr {r['learning_rate']:g}",
                        []).append(r)
  for label, rs in sorted(groups.items()):
    for ax, curves in (
        (axes[0], [r["train_curve"] for r in rs]),
        (axes[1], [[(e["step"], e.get("mlm_accuracy")) for e in
                    r["eval_curve"]] for r in rs])):
      steps, mean, sd = _band(curves)
      if not steps:
        continue
      line, = ax.plot(steps, mean, label=f"{label} (n={len(rs)})")
      ax.fill_between(steps, [m - s for m, s in zip(mean, sd)],
                      [m + s for m, s in zip(mean, sd)],
                      color=line.get_color(), alpha=0.2)
  axes[0].set(title="training loss (0.8 MLM + 0.2 CPC)", xlabel="step",
              ylabel="loss")
  axes[1].set(title="held-out MLM accuracy", xlabel="step",
              ylabel="accuracy")
  axes[1].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def difference(a: Dict[str, Any], b: Dict[str, Any], metric: str
               ) -> Optional[Tuple[float, float]]:
  """(mean of a - mean of b, the smallest difference a Welch t-test at 95 %
  resolves at these spreads) for two `summarize` rows, or None with fewer
  than two runs on a side or no spread at all."""
  n_a, n_b = len(a["seeds"]), len(b["seeds"])
  if n_a < 2 or n_b < 2:
    return None
  v_a, v_b = a[metric + "_sd"] ** 2 / n_a, b[metric + "_sd"] ** 2 / n_b
  if v_a + v_b == 0.0:
    return None
  # Welch-Satterthwaite degrees of freedom.
  df = (v_a + v_b) ** 2 / (v_a ** 2 / (n_a - 1) + v_b ** 2 / (n_b - 1))
  return a[metric] - b[metric], study_rules.t975(df) * math.sqrt(v_a + v_b)


def differences(rows: Sequence[Dict[str, Any]], reference: str) -> str:
  """A Markdown table: each row minus the `reference` variant's row at the
  same learning rate, beside the smallest difference the seeds resolve
  (a Welch t-test at 95 %); `*` marks differences that are resolved."""
  base = {r["learning_rate"]: r for r in rows if r["variant"] == reference}
  lines = [f"Difference to {reference} at the same learning rate (mean "
           "difference / smallest difference the seed spread resolves, "
           "Welch t-test at 95 %; * = resolved):", "",
           "| variant | learning rate | " + " | ".join(METRICS) + " |",
           "|---|---|" + "---|" * len(METRICS)]
  for r in rows:
    ref = base.get(r["learning_rate"])
    if r["variant"] == reference or ref is None:
      continue
    cells = []
    for m in METRICS:
      d = difference(r, ref, m)
      if d is None:
        cells.append("-")
      else:
        digits = 4 if "accuracy" in m else 3
        mark = "*" if abs(d[0]) > d[1] else ""
        cells.append(f"{d[0]:+.{digits}f} / {d[1]:.{digits}f}{mark}")
    lines.append(f"| {r['variant']} | {r['learning_rate']:g} | " +
                 " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def stability_table(records: Sequence[Dict[str, Any]]) -> str:
  """A Markdown table of a learning-rate sweep: per variant and rate, the
  runs that failed (and why, by `study_rules.failure`) and every seed's
  final held-out MLM loss (a failed run's marked `!`)."""
  groups: Dict[Tuple[str, float], List[Dict[str, Any]]] = {}
  for r in records:
    if "failed" in r:
      groups.setdefault((r["variant"], r["learning_rate"]), []).append(r)
  order = {v: i for i, v in enumerate(VARIANTS)}
  lines = ["| variant | learning rate | runs (failed) | why | held-out MLM "
           "loss per seed | mean +- sd |", "|---|---|---|---|---|---|"]
  for (variant, lr), rs in sorted(groups.items(), key=lambda kv: (
      order.get(kv[0][0], len(order)), kv[0][1])):
    rs = sorted(rs, key=lambda r: r["seed"])
    losses = [study_rules.scored_loss(r) for r in rs]
    mean, sd = _mean_sd(losses)
    why = sorted({r["failure"] for r in rs if r["failed"]})
    per_seed = ", ".join(
        f"{r['seed']}: " + (f"{r['mlm_loss']:.3f}" if _finite(r["mlm_loss"])
                            else "nan") + ("!" if r["failed"] else "")
        for r in rs)
    lines.append(f"| {variant} | {lr:g} | {len(rs)} "
                 f"({sum(bool(r['failed']) for r in rs)}) | "
                 f"{', '.join(why) or '-'} | {per_seed} | "
                 f"{mean:.3f} +- {sd:.3f} |")
  return "\n".join(lines) + "\n"


def plot_loss_against_rate(records: Sequence[Dict[str, Any]],
                           path: str) -> None:
  """Final held-out MLM loss against the learning rate (log scale), every
  run a point (failed runs hollow, non-finite ones at the unigram
  baseline), the mean over seeds a line per variant; the unigram baseline
  dashed."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7.5, 4.8))
  by_variant: Dict[str, List[Dict[str, Any]]] = {}
  for r in records:
    if "failed" in r:
      by_variant.setdefault(r["variant"], []).append(r)
  order = {v: i for i, v in enumerate(VARIANTS)}
  for i, (variant, rs) in enumerate(sorted(
      by_variant.items(), key=lambda kv: order.get(kv[0], len(order)))):
    colour = f"C{i}"
    # A small offset per variant so that points at one rate do not hide
    # each other.
    shift = 1.0 + 0.04 * (i - (len(by_variant) - 1) / 2)
    rates = sorted({r["learning_rate"] for r in rs})
    ax.plot(rates, [statistics.fmean(study_rules.scored_loss(r) for r in rs
                                     if r["learning_rate"] == lr)
                    for lr in rates], color=colour, label=variant)
    for failed in (False, True):
      pts = [r for r in rs if bool(r["failed"]) == failed]
      ax.scatter([r["learning_rate"] * shift for r in pts],
                 [study_rules.scored_loss(r) for r in pts],
                 facecolors="none" if failed else colour,
                 edgecolors=colour, s=28, zorder=3,
                 label=f"{variant}: failed" if failed and pts else None)
  baselines = {r["mlm_unigram_baseline"] for r in records
               if r.get("mlm_unigram_baseline") is not None}
  for b in baselines:
    ax.axhline(b, color="grey", linestyle="--", linewidth=1)
    ax.annotate("unigram baseline", (ax.get_xlim()[0], b), fontsize=7,
                color="grey", va="bottom")
  layers = sorted({r.get("num_layers") for r in records
                   if r.get("num_layers")})
  ax.set(xscale="log", xlabel="peak learning rate",
         ylabel="final held-out MLM loss (nats)",
         title="Held-out MLM loss against the learning rate" + (
             f" ({'/'.join(map(str, layers))} layers)" if layers else ""))
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def write_summary(out_dir: str) -> str:
  """table.md and curves.png from runs.jsonl; for a learning-rate sweep
  (records judged by the study's rules) also stability.md,
  loss_vs_rate.png and verdicts.json; returns the tables."""
  records = read_records(os.path.join(out_dir, RECORDS_FILE))
  rows = summarize(records)
  text = table(rows)
  variants = {r["variant"] for r in rows}
  if "realformer" in variants and len(variants) > 1:
    text += "\n" + differences(rows, "realformer")
  with open(os.path.join(out_dir, TABLE_FILE), "w", encoding="utf-8") as f:
    f.write(text)
  if records:
    plot(records, os.path.join(out_dir, PLOT_FILE))
  if any("failed" in r for r in records):
    stability = stability_table(records)
    with open(os.path.join(out_dir, STABILITY_FILE), "w",
              encoding="utf-8") as f:
      f.write(stability)
    plot_loss_against_rate(records, os.path.join(out_dir, RATE_PLOT_FILE))
    verdict = study_rules.stability_verdict(
        [r for r in records if "failed" in r])
    with open(os.path.join(out_dir, VERDICT_FILE), "w",
              encoding="utf-8") as f:
      json.dump(verdict, f, indent=2, sort_keys=True)
    text += (f"\n{stability}\nstability claim: {verdict['verdict']}" + (
        f" (learning rate {verdict['learning_rate']:g})"
        if verdict["learning_rate"] is not None else "") + "\n")
  return text


# ------------------------------------------------------------------ setup
def prepare_base(out_dir: str, data_dir: Optional[str], quick: bool,
                 train_steps: int, eval_every: int) -> str:
  """Writes OUT/base.gin (and, without --data_dir, the demo's data under
  OUT/data once); returns its path."""
  from demos.pretrain import demo  # pylint: disable=g-import-not-at-top
  from tasks.pretrain import preprocess  # pylint: disable=g-import-not-at-top
  if data_dir is None:
    data_dir = os.path.join(out_dir, "data")
    stats_path = os.path.join(data_dir, preprocess.STATS_FILE)
    if not os.path.exists(stats_path):  # all or nothing: written last
      demo.make_data(data_dir, seed=0,
                     max_documents=QUICK_DOCUMENTS if quick else None)
  stats_path = os.path.join(data_dir, preprocess.STATS_FILE)
  if not os.path.exists(stats_path):
    raise SystemExit(f"{stats_path}: no preprocessing stats (run "
                     "python -m tasks.pretrain.preprocess into --data_dir)")
  with open(stats_path, encoding="utf-8") as f:
    stats = json.load(f)
  vocab_size = stats["vocabulary"]["size"]
  baseline_path = os.path.join(out_dir, BASELINE_FILE)
  if not os.path.exists(baseline_path):
    baseline = dict(study_rules.unigram_baseline(data_dir, stats),
                    data_dir=os.path.abspath(data_dir))
    with open(baseline_path, "w", encoding="utf-8") as f:
      json.dump(baseline, f, indent=2, sort_keys=True)
  lines = [demo.demo_gin(os.path.abspath(data_dir), vocab_size, train_steps,
                         seed=0),
           f"TrainerConfig.eval_interval = {eval_every}",
           f"TrainerConfig.checkpoint_interval = {eval_every}",
           # About 30 points on each training-loss curve.
           f"TrainerConfig.steps_per_loop = "
           f"{max(1, min(eval_every, train_steps // 30))}"]
  if quick:
    lines += QUICK_BINDINGS
  path = os.path.join(out_dir, "base.gin")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return path


def _csv(kind):
  return lambda s: [kind(x) for x in s.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog="python -m tools.analysis.compare_residual_attention",
      description=__doc__.split("\n")[0])
  a = p.add_argument
  a("--output_dir", required=True)
  a("--variants", type=_csv(str), default=list(VARIANTS))
  a("--seeds", type=_csv(int), default=[0, 1, 2])
  a("--lr_multipliers", type=_csv(float), default=[1.0, 2.0])
  a("--lr_variants", type=_csv(str), default=list(LR_VARIANTS))
  a("--learning_rates", type=_csv(float), default=[],
    help="a sweep: every variant at each of these peak learning rates "
    "(runs named by the rate; --lr_multipliers and --lr_variants unused)")
  a("--train_steps", type=int, default=None,
    help="default: the demo's (--quick: 6)")
  a("--eval_every", type=int, default=None,
    help="held-out evaluation (and checkpoint) interval; default a third "
    "of the steps (--quick: at the end only)")
  a("--data_dir", default=None,
    help="preprocessed pre-training data (default: the demo's corpus)")
  a("--gin_file", action="append", default=[],
    help="applied to every run after the base (strategy, size, precision)")
  a("--gin_bindings", action="append", default=[])
  a("--jobs", type=int, default=1, help="runs at the same time")
  a("--quick", action="store_true")
  a("--summarize_only", action="store_true",
    help="only write table.md and curves.png from runs.jsonl")
  return p


def main(argv: Optional[List[str]] = None) -> int:
  args = build_parser().parse_args(argv)
  out_dir = os.path.abspath(args.output_dir)
  os.makedirs(out_dir, exist_ok=True)
  if args.summarize_only:
    print(write_summary(out_dir), end="")
    return 0
  unknown = sorted(set(args.variants) - set(VARIANTS))
  if unknown or not args.variants or not args.seeds:
    raise SystemExit(f"--variants: unknown {unknown}; known: "
                     f"{', '.join(VARIANTS)}" if unknown else
                     "--variants and --seeds must not be empty")
  from demos.pretrain import demo  # pylint: disable=g-import-not-at-top
  steps = args.train_steps or (QUICK_STEPS if args.quick
                               else demo.TRAIN_STEPS)
  eval_every = args.eval_every or (steps if args.quick
                                   else max(1, steps // 3))
  if args.learning_rates:
    runs = plan_rate_runs(args.variants, args.seeds, args.learning_rates,
                          demo.LEARNING_RATE)
  else:
    runs = plan_runs(args.variants, args.seeds, args.lr_multipliers,
                     args.lr_variants, demo.LEARNING_RATE)
  records_path = os.path.join(out_dir, RECORDS_FILE)
  todo = pending(runs, read_records(records_path))
  print(f"compare | {len(runs)} runs planned, {len(runs) - len(todo)} "
        f"already recorded in {records_path}, {len(todo)} to run",
        flush=True)
  if todo:
    base_gin = prepare_base(out_dir, args.data_dir, args.quick, steps,
                            eval_every)
    with open(os.path.join(out_dir, BASELINE_FILE), encoding="utf-8") as f:
      baseline_loss = json.load(f)["loss"]
    with futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
      jobs = {pool.submit(execute, run, out_dir, base_gin, args.gin_file,
                          args.gin_bindings, steps, baseline_loss): run
              for run in todo}
      for job in futures.as_completed(jobs):
        record = job.result()
        append_record(records_path, record)
        print(f"compare | {record['run']}: " + (
            "DIVERGED or failed (see its log.txt)" if record["diverged"]
            else ", ".join(f"{m} {record[m]:.4f}" for m in METRICS) + (
                f" (failed: {record['failure']})" if record["failed"]
                else "")) +
              f" ({record['wall_s']:.0f} s)", flush=True)
  print(write_summary(out_dir), end="", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
