"""The decision rules of the residual-attention study (`docs/realformer.md`,
"The rules"), as code: when a run has failed, the baseline it is judged
against, and the verdicts on the stability and the adjacent-layer JSD
claims.

The rules were written down before the runs they judge; this module is
their one executable form, so the records, the tables and the verdict
lines in the doc all come from the same definitions:

* `unigram_baseline`: the held-out MLM loss of a model that ignores context
  (every eligible held-out wordpiece predicted from the training corpus's
  wordpiece frequencies).
* `failure`: a run fails if its process failed or a loss or metric was not
  finite, if its final held-out MLM loss is not at least `LEARNED_MARGIN`
  below that baseline, or if it ends more than `BROKE_MARGIN` above its own
  best held-out MLM loss.
* `stability_verdict`, `jsd_verdict`: the verdicts, from the records and
  from the per-seed attention statistics.

Welch's test (`welch`) is the one `compare_residual_attention` uses for
its tables (the same t table).
"""

import collections
import glob
import math
import os
import statistics
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

# A run whose final held-out MLM loss is not this far below the unigram
# baseline learned nothing beyond token frequencies (nats).
LEARNED_MARGIN = 0.1
# A run whose final held-out MLM loss is this far above its own best was
# learning, then broke (nats).
BROKE_MARGIN = 0.5
# Seeds of one variant at one rate that must fail (of 3) for the variant to
# count as broken at that rate.
BROKEN_SEEDS = 2


# ----------------------------------------------------------------- Welch
# Two-sided 95 % quantiles of Student's t by degrees of freedom (1..30; the
# normal's 1.96 beyond): a table, so that the study's summaries need no SciPy.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262,
         2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093,
         2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
         2.042)


def t975(df: float) -> float:
  """The 97.5 % quantile of Student's t at `df` degrees of freedom (rounded
  down to a whole df: errs wide)."""
  k = max(1, int(math.floor(df)))
  return _T975[k - 1] if k <= len(_T975) else 1.96


def welch(a: Sequence[float], b: Sequence[float]
          ) -> Optional[Tuple[float, float]]:
  """(mean(a) - mean(b), the smallest difference a two-sided Welch t-test
  at 95 % resolves at these spreads), or None with fewer than two values on
  a side or no spread at all."""
  if len(a) < 2 or len(b) < 2:
    return None
  v_a = statistics.variance(a) / len(a)
  v_b = statistics.variance(b) / len(b)
  if v_a + v_b == 0.0:
    return None
  # Welch-Satterthwaite degrees of freedom.
  df = (v_a + v_b) ** 2 / (v_a ** 2 / (len(a) - 1) + v_b ** 2 / (len(b) - 1))
  return statistics.fmean(a) - statistics.fmean(b), t975(df) * math.sqrt(
      v_a + v_b)


def resolved(d: Optional[Tuple[float, float]]) -> bool:
  return d is not None and abs(d[0]) > d[1]


# -------------------------------------------------------------- baseline
def _token_counts(files: Sequence[str], vocab_size: int,
                  special_ids: Iterable[int]) -> np.ndarray:
  """Counts of every eligible wordpiece id (not padding, not special) in the
  pre-training TFRecords' `token_ids`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  counts = np.zeros([vocab_size], np.int64)
  spec = {"token_ids": tf.io.VarLenFeature(tf.int64)}
  for record in tf.data.TFRecordDataset(list(files)):
    ids = tf.io.parse_single_example(record, spec)["token_ids"].values
    counts += np.bincount(ids.numpy(), minlength=vocab_size)[:vocab_size]
  counts[0] = 0  # padding
  for i in special_ids:
    counts[int(i)] = 0
  return counts


def unigram_baseline(data_dir: str, stats: Mapping[str, Any]
                     ) -> Dict[str, float]:
  """The held-out MLM loss and accuracy of a context-free predictor.

  Every eligible held-out wordpiece (masking draws its targets uniformly
  from them, whole words at a time) is predicted from the training
  examples' wordpiece frequencies, with add-one smoothing over the
  vocabulary: `loss` is that cross-entropy (nats), `accuracy` the share of
  the most frequent training wordpiece. `stats` is the preprocessing stats
  JSON (its `vocabulary`).
  """
  vocabulary = stats["vocabulary"]
  size = int(vocabulary["size"])
  special = vocabulary.get("special_token_ids", ())
  train = _token_counts(sorted(glob.glob(os.path.join(
      data_dir, "train-*.tfrecord"))), size, special)
  held_out = _token_counts(sorted(glob.glob(os.path.join(
      data_dir, "eval-*.tfrecord"))), size, special)
  if not train.sum() or not held_out.sum():
    raise ValueError(f"{data_dir}: no train or eval tokens to count")
  eligible = np.ones([size], bool)
  eligible[0] = False
  eligible[list(map(int, special))] = False
  p = np.where(eligible, train + 1.0, 0.0)
  p /= p.sum()
  n = held_out.sum()
  loss = float(-(held_out[eligible] * np.log(p[eligible])).sum() / n)
  return {"loss": loss,
          "accuracy": float(held_out[int(np.argmax(train))] / n),
          "held_out_tokens": int(n), "train_tokens": int(train.sum())}


# ---------------------------------------------------------------- failure
def _finite(x: Any) -> bool:
  return isinstance(x, (int, float)) and math.isfinite(x)


def failure(returncode: int, train_curve: Sequence[Sequence[Any]],
            eval_curve: Sequence[Mapping[str, Any]],
            final: Mapping[str, Any], baseline_loss: Optional[float]
            ) -> Optional[str]:
  """Why a run failed (None: it trained), by the rules in order:
  "process" (non-zero exit), "non-finite" (a training loss or a held-out
  metric), "no better than unigram" (final held-out MLM loss not
  `LEARNED_MARGIN` below `baseline_loss`), "broke" (final loss more than
  `BROKE_MARGIN` above the run's best held-out MLM loss)."""
  if returncode != 0:
    return "process"
  values = [loss for _, loss in train_curve] + [
      v for e in eval_curve for k, v in e.items() if k != "step"] + [
          final.get("mlm_loss"), final.get("mlm_accuracy")]
  if not all(_finite(v) for v in values):
    return "non-finite"
  loss = final["mlm_loss"]
  if baseline_loss is not None and loss >= baseline_loss - LEARNED_MARGIN:
    return "no better than unigram"
  best = min([e["mlm_loss"] for e in eval_curve if "mlm_loss" in e] + [loss])
  if loss > best + BROKE_MARGIN:
    return "broke"
  return None


def scored_loss(record: Mapping[str, Any]) -> float:
  """A run's final held-out MLM loss for the tests over losses: a run with
  no finite loss counts at the unigram baseline (what a model that lost
  its context scores)."""
  loss = record.get("mlm_loss")
  if _finite(loss):
    return float(loss)
  return float(record["mlm_unigram_baseline"])


# --------------------------------------------------------------- verdicts
def by_rate(records: Sequence[Mapping[str, Any]], variant: str
            ) -> Dict[float, List[Mapping[str, Any]]]:
  out: Dict[float, List[Mapping[str, Any]]] = collections.defaultdict(list)
  for r in records:
    if r["variant"] == variant:
      out[r["learning_rate"]].append(r)
  return dict(sorted(out.items()))


def _broken(runs: Sequence[Mapping[str, Any]]) -> bool:
  return len(runs) >= 3 and sum(bool(r["failed"]) for r in runs) >= (
      BROKEN_SEEDS)


# The seeds the stability rule reads ("2 of its 3 seeds"); runs of other
# seeds at a rate are reported, not judged.
STABILITY_SEEDS = (0, 1, 2)


def stability_verdict(records: Sequence[Mapping[str, Any]],
                      baseline: str = "post_ln",
                      candidate: str = "realformer",
                      seeds: Sequence[int] = STABILITY_SEEDS
                      ) -> Dict[str, Any]:
  """The stability claim, over the runs of `seeds`: `confirmed` if at some
  rate `baseline` fails in at least 2 of its 3 seeds while `candidate`
  trains in all 3 and its held-out loss is lower by a Welch-resolved
  difference; `refuted` if at the lowest rate where `baseline` is broken
  `candidate` is broken too, or if `candidate` is broken at a rate where
  `baseline` is not; else `not resolved`. Returns the verdict, the rate it
  rests on and the per-rate evidence."""
  records = [r for r in records if r["seed"] in seeds]
  base, cand = by_rate(records, baseline), by_rate(records, candidate)
  evidence = []
  for lr in sorted(set(base) & set(cand)):
    b, c = base[lr], cand[lr]
    d = welch([scored_loss(r) for r in c], [scored_loss(r) for r in b])
    evidence.append({
        "learning_rate": lr, f"{baseline}_failed": sum(
            bool(r["failed"]) for r in b), f"{baseline}_runs": len(b),
        f"{candidate}_failed": sum(bool(r["failed"]) for r in c),
        f"{candidate}_runs": len(c),
        "loss_difference": None if d is None else d[0],
        "resolvable": None if d is None else d[1],
        "resolved": resolved(d),
        "baseline_broken": _broken(b), "candidate_broken": _broken(c),
        "candidate_trains": len(c) >= 3 and not any(r["failed"] for r in c)})
  verdict, rate = "not resolved", None
  for e in evidence:
    if e["candidate_broken"] and not e["baseline_broken"]:
      verdict, rate = "refuted", e["learning_rate"]
      break
  if verdict == "not resolved":
    broken = [e for e in evidence if e["baseline_broken"]]
    if broken and broken[0]["candidate_broken"]:
      verdict, rate = "refuted", broken[0]["learning_rate"]
    else:
      for e in broken:
        if (e["candidate_trains"] and e["resolved"] and
            e["loss_difference"] < 0):
          verdict, rate = "confirmed", e["learning_rate"]
          break
  return {"claim": "stability", "verdict": verdict, "learning_rate": rate,
          "evidence": evidence}


def per_layer(report: Mapping[str, Any], label: str, branch: str, metric: str
              ) -> List[float]:
  """One checkpoint's statistic per layer (entropy) or adjacent pair (jsd)
  on one branch of an `attention_analysis` report: the mean over heads of
  each head's median."""
  entry = next(e for e in report["checkpoints"] if e["label"] == label)
  return [statistics.fmean(h["median"] for h in layer["heads"])
          for layer in entry["branches"][branch][metric]]


def layer_verdict(candidate: Sequence[Sequence[float]],
                  baseline: Sequence[Sequence[float]], needed: int
                  ) -> Dict[str, Any]:
  """`candidate` / `baseline`: per seed, one value per layer (or pair).
  `confirmed` if the candidate's mean is lower by a Welch-resolved
  difference in at least `needed` layers, `refuted` if higher by a resolved
  difference in at least `needed`, else `not resolved`; with each layer's
  difference and resolvable difference."""
  layers = []
  for i in range(len(candidate[0])):
    d = welch([s[i] for s in candidate], [s[i] for s in baseline])
    layers.append({"layer": i, "difference": None if d is None else d[0],
                   "resolvable": None if d is None else d[1],
                   "resolved": resolved(d)})
  lower = sum(1 for l in layers if l["resolved"] and l["difference"] < 0)
  higher = sum(1 for l in layers if l["resolved"] and l["difference"] > 0)
  verdict = ("confirmed" if lower >= needed else
             "refuted" if higher >= needed else "not resolved")
  return {"verdict": verdict, "lower": lower, "higher": higher,
          "layers": layers}


def jsd_verdict(candidate: Sequence[Sequence[float]],
                baseline: Sequence[Sequence[float]]) -> Dict[str, Any]:
  """The adjacent-layer JSD claim on one branch: RealFormer's JSD lower by a
  resolved difference in at least 3 of the 5 adjacent pairs of a 6-layer
  model (in general, a majority of the pairs)."""
  pairs = len(candidate[0])
  return dict(layer_verdict(candidate, baseline, pairs // 2 + 1),
              claim="jsd")


def sparsity_verdict(candidate: Sequence[Sequence[float]],
                     baseline: Sequence[Sequence[float]]) -> Dict[str, Any]:
  """The sparser-upper-layers claim on one branch: RealFormer's entropy lower
  by a resolved difference in at least 2 of the upper 3 layers (in general,
  a majority of the upper half)."""
  upper = len(candidate[0]) // 2
  cut = len(candidate[0]) - upper
  return dict(layer_verdict([s[cut:] for s in candidate],
                            [s[cut:] for s in baseline], upper // 2 + 1),
              claim="sparsity", first_layer=cut)
