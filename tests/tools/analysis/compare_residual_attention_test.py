"""Tests of `tools.analysis.compare_residual_attention`: the plan, the curves
read from the histories a run's training writes, the records and their summary
on hand-made values, and the quick mode end to end (a tiny model, two variants,
two seeds) with the resume of an interrupted comparison."""

import json
import math
import os

import numpy as np
import pytest

from tools.analysis import compare_residual_attention as compare
from tools.analysis import study_rules

def test_variants_set_what_they_name():
  assert "etc_config.residual_attention = False" in compare.VARIANTS["post_ln"]
  assert "etc_config.use_pre_activation_order = True" in (
      compare.VARIANTS["pre_ln"])
  assert "etc_config.residual_running_mean = True" in (
      compare.VARIANTS["running_mean"])
  assert ("etc_config.residual_patterns = ('l2l', 'l2g', 'g2l',)" in
          compare.VARIANTS["no_g2g_stream"])


def test_plan_and_pending():
  runs = compare.plan_runs(["post_ln", "realformer", "no_l2l_stream"],
                           [0, 1], [1.0, 2.0], ["post_ln", "realformer"],
                           base_learning_rate=0.01)
  # 3 variants x 2 seeds at the base rate, 2 variants x 2 seeds at 2x.
  assert len(runs) == 10
  assert {r.learning_rate for r in runs if r.lr_multiplier == 2.0} == {0.02}
  assert not [r for r in runs if r.variant == "no_l2l_stream" and
              r.lr_multiplier != 1.0]
  # Every variant once (seed 0) before any twice.
  assert [r.seed for r in runs[:5]] == [0] * 5
  records = [{"run": runs[0].name}, {"run": runs[3].name}]
  assert compare.pending(runs, records) == [
      r for i, r in enumerate(runs) if i not in (0, 3)]


def _write_histories(model_dir, train_losses, evaluations):
  """The histories a run's training writes, through its own actions."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import experiment  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import trainer  # pylint: disable=g-import-not-at-top
  step = tf.Variable(0, dtype=tf.int64)
  train = trainer.HistoryAction(
      step, os.path.join(model_dir, experiment.TRAIN_HISTORY_FILE))
  evaluate = trainer.HistoryAction(
      step, os.path.join(model_dir, experiment.EVAL_HISTORY_FILE))
  for s, loss in train_losses:
    step.assign(s)
    train({"loss": np.float32(loss), "learning_rate": np.float32(0.01)})
  for s, metrics in evaluations:
    step.assign(s)
    evaluate({k: np.float32(v) for k, v in metrics.items()})


def test_curves_from_the_histories_and_record(tmp_path):
  metrics = {"cpc_accuracy": 0.25, "cpc_loss": 1.5, "loss": 2.0,
             "mlm_accuracy": 0.5, "mlm_loss": 3.0}
  # A resumed run evaluates step 4 again: the later evaluation counts.
  _write_histories(str(tmp_path), [(2, 5.5), (4, 4.25)],
                   [(4, dict(metrics, mlm_accuracy=0.1)), (4, metrics)])
  train, evals = compare.read_curves(str(tmp_path))
  assert train == [[2, 5.5], [4, 4.25]]
  assert evals == [{"step": 4, "mlm_accuracy": 0.5, "mlm_loss": 3.0,
                    "cpc_accuracy": 0.25, "cpc_loss": 1.5}]
  assert compare.read_curves(str(tmp_path / "none")) == ([], [])
  run = compare.Run("realformer", 1, 1.0, 0.01)
  final = {"step": 4, "mlm_accuracy": 0.5, "mlm_loss": 3.0,
           "cpc_accuracy": 0.25, "cpc_loss": 1.5}
  curves = (train, evals)
  r = compare.make_record(run, 0, curves, final, 4, ["b = 1"], ["python"],
                          2.0)
  assert (r["variant"], r["seed"], r["learning_rate"], r["steps"]) == (
      "realformer", 1, 0.01, 4)
  assert r["diverged"] is False and r["mlm_accuracy"] == 0.5
  assert r["train_curve"] == train and r["eval_curve"] == evals
  assert compare.make_record(run, 1, curves, None, 4, [], [], 1.0)[
      "diverged"] is True


def test_a_non_finite_loss_is_recorded_as_divergence(tmp_path):
  _write_histories(str(tmp_path), [(2, 5.5), (4, float("nan"))], [])
  train, evals = compare.read_curves(str(tmp_path))
  assert train == [[2, 5.5], [4, None]] and evals == []
  final = {"step": 4, **{m: 1.0 for m in compare.METRICS}}
  assert compare.make_record(compare.Run("post_ln", 0, 1.0, 0.01), 0,
                             (train, evals), final, 4, [], [], 1.0)[
                                 "diverged"] is True


def test_summary_mean_sd_and_diverged_apart():
  def rec(variant, seed, acc, diverged=False):
    return {"variant": variant, "seed": seed, "learning_rate": 0.01,
            "mlm_accuracy": acc, "mlm_loss": 1.0, "cpc_accuracy": acc,
            "cpc_loss": 1.0, "diverged": diverged}
  rows = compare.summarize([rec("realformer", 0, 0.2), rec("post_ln", 0, 0.1),
                            rec("post_ln", 1, 0.3),
                            rec("post_ln", 2, float("nan"), diverged=True)])
  assert [r["variant"] for r in rows] == ["post_ln", "realformer"]
  post = rows[0]
  assert (post["runs"], post["diverged"], post["seeds"]) == (3, 1, [0, 1])
  assert post["mlm_accuracy"] == pytest.approx(0.2)
  assert post["mlm_accuracy_sd"] == pytest.approx(math.sqrt(0.02))
  text = compare.table(rows)
  assert "| post_ln | 0.01 | 3 (1) | 0.2000 +- 0.1414 |" in text


def test_differences_resolved_only_beyond_the_seed_spread():
  # Hand-worked: means 0.30 and 0.20, sds 0.01 and 0.02 over three seeds:
  # SE = sqrt(0.01^2/3 + 0.02^2/3) = 0.012910; Welch df = 2.94 -> 2, t =
  # 4.303: resolved beyond 0.05555.
  def row(variant, mean, sd, lr=0.01):
    return {"variant": variant, "learning_rate": lr, "seeds": [0, 1, 2],
            **{m: mean for m in compare.METRICS},
            **{m + "_sd": sd for m in compare.METRICS}}
  diff, resolvable = compare.difference(row("a", 0.30, 0.01),
                                        row("b", 0.20, 0.02), "mlm_accuracy")
  assert diff == pytest.approx(0.10)
  assert resolvable == pytest.approx(4.303 * math.sqrt(0.0005 / 3), rel=1e-6)
  assert study_rules.t975(2.94) == 4.303 and study_rules.t975(100) == 1.96
  text = compare.differences(
      [row("realformer", 0.20, 0.02), row("post_ln", 0.30, 0.01),
       row("pre_ln", 0.21, 0.01), row("pre_ln", 0.5, 0.01, lr=0.02)],
      "realformer")
  assert "| post_ln | 0.01 | +0.1000 / 0.0556* |" in text
  assert "| pre_ln | 0.01 | +0.0100 / 0.0556 |" in text
  assert "0.02" not in text  # no realformer row at that learning rate
  one_seed = dict(row("post_ln", 0.3, 0.0), seeds=[0])
  assert compare.difference(one_seed, row("b", 0.2, 0.01),
                            "mlm_accuracy") is None


@pytest.mark.slow
def test_quick_comparison_end_to_end_resuming_an_interrupted_one(tmp_path,
                                                                 capsys):
  """The quick mode over two variants, resuming a comparison interrupted
  after one run, while it wrote the next record: the recorded run is not
  run again, the half-written line is dropped, the other one runs and both
  records are read back."""
  out = tmp_path / "study"
  out.mkdir()
  recorded = compare.make_record(
      compare.Run("realformer", 0, 1.0, 0.01), 0, ([[6, 5.0]], []),
      {"step": 6, "mlm_accuracy": 0.125, "mlm_loss": 5.5,
       "cpc_accuracy": 0.25, "cpc_loss": 2.0}, 6, [], [], 1.0)
  (out / compare.RECORDS_FILE).write_text(
      json.dumps(recorded) + "\n" + '{"run": "post_ln-lr1x-se')
  # The tool's main in this process (its runs still start their own): a
  # process of its own would import TensorFlow once more.
  assert compare.main(
      ["--quick", "--variants=post_ln,realformer", "--seeds=0",
       "--lr_multipliers=1", "--jobs=2", f"--output_dir={out}"]) == 0
  stdout = capsys.readouterr().out
  assert "2 runs planned, 1 already recorded" in stdout
  records = compare.read_records(str(out / compare.RECORDS_FILE))
  assert sorted(r["run"] for r in records) == [
      "post_ln-lr1x-seed0", "realformer-lr1x-seed0"]
  assert records[0] == recorded
  for r in records[1:]:
    assert not r["diverged"], r
    assert r["steps"] == compare.QUICK_STEPS
    assert 0 <= r["mlm_accuracy"] <= 1 and r["mlm_loss"] > 0
    assert 0 <= r["cpc_accuracy"] <= 1
    assert r["train_curve"] and r["eval_curve"][-1]["step"] == (
        compare.QUICK_STEPS)
    assert "optimizer.learning_rate = 0.01" in r["bindings"]
  assert "| post_ln | 0.01 | 1 (0) |" in stdout
  assert "| realformer | 0.01 | 1 (0) |" in stdout
  assert (out / compare.TABLE_FILE).exists()
  assert (out / compare.PLOT_FILE).stat().st_size > 0


def test_a_sweep_names_runs_by_their_rate():
  runs = compare.plan_rate_runs(["post_ln", "realformer"], [0, 1],
                                [0.003, 0.001], 0.01)
  assert [r.name for r in runs[:4]] == [
      "post_ln-lr0.001-seed0", "realformer-lr0.001-seed0",
      "post_ln-lr0.003-seed0", "realformer-lr0.003-seed0"]
  assert runs[0].lr_multiplier == pytest.approx(0.1)
  assert len(runs) == 8


def test_sweep_records_are_judged_and_summarized(tmp_path):
  def record(variant, lr, seed, loss, curve=None):
    final = {"step": 200, "mlm_accuracy": 0.2, "mlm_loss": loss,
             "cpc_accuracy": 0.0, "cpc_loss": 0.0}
    evals = curve or [{"step": 100, "mlm_loss": loss, "mlm_accuracy": 0.2}]
    return compare.make_record(
        compare.Run(variant, seed, lr / 0.01, lr, by_rate=True), 0,
        ([[1, 7.0], [200, loss]], evals), final, 200, [], [], 1.0,
        num_layers=6, baseline_loss=5.7)
  records = [record(v, 0.003, s, 4.6 + 0.01 * s)
             for v in ("post_ln", "realformer") for s in range(3)]
  records += [record("post_ln", 0.01, s, 5.69) for s in range(3)]
  records += [record("realformer", 0.01, s, 5.0 + 0.01 * s) for s in range(3)]
  broke = record("realformer", 0.02, 0, 5.2,
                 curve=[{"step": 100, "mlm_loss": 4.6}])
  assert (broke["failed"], broke["failure"], broke["num_layers"]) == (
      True, "broke", 6)
  assert records[0]["failed"] is False and records[0]["diverged"] is False
  assert records[6]["failure"] == "no better than unigram"
  for r in records + [broke]:
    compare.append_record(str(tmp_path / compare.RECORDS_FILE), r)
  text = compare.write_summary(str(tmp_path))
  assert "| post_ln | 0.01 | 3 (3) | no better than unigram | 0: 5.690!, " in (
      text)
  assert "stability claim: confirmed (learning rate 0.01)" in text
  assert (tmp_path / compare.RATE_PLOT_FILE).stat().st_size > 0
  verdict = json.loads((tmp_path / compare.VERDICT_FILE).read_text())
  assert verdict["verdict"] == "confirmed"
