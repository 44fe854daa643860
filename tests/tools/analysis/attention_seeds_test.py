"""Tests of `tools.analysis.attention_seeds`: the per-run statistics read from
an `attention_analysis` report, their summary over seeds with the verdicts, and
the tables and plot written from them (on a hand-made report)."""

import json

import pytest

from tools.analysis import attention_seeds


def _entry(label, entropy, jsd):
  """A report entry: per layer (pair), two heads around the value."""
  def layers(values, pairs):
    return [dict({"layers": [i, i + 1]} if pairs else {"layer": i},
                 heads=[{"median": v - 0.01}, {"median": v + 0.01}])
            for i, v in enumerate(values)]
  branch = {"entropy": layers(entropy, False), "jsd": layers(jsd, True)}
  return {"label": label, "branches": {"long": branch, "global": branch}}


def _report(seeds):
  entries = []
  for s in seeds:
    e = 0.001 * s
    entries.append(_entry(f"post_ln-seed{s}", [3.0 + e] * 4,
                          [0.10 + e] * 3))
    entries.append(_entry(f"realformer-seed{s}", [3.0 + e] * 2 + [2.5 + e] * 2,
                          [0.05 + e] * 3))
  return {"checkpoints": entries}


def test_summary_tables_and_plot(tmp_path, monkeypatch):
  seeds = [0, 1, 2]
  (tmp_path / "attention_stats.json").write_text(json.dumps(_report(seeds)))
  assert attention_seeds.main([
      f"--study_dir={tmp_path}", "--learning_rate=0.005",
      f"--output_dir={tmp_path}", "--seeds=0,1,2", "--summarize_only"]) == 0
  out = json.loads((tmp_path / attention_seeds.REPORT).read_text())
  assert out["values"]["post_ln"]["jsd"]["long"] == [
      pytest.approx([0.10, 0.10, 0.10]), pytest.approx([0.101] * 3),
      pytest.approx([0.102] * 3)]
  summary = out["summary"]
  assert summary["jsd/long"]["verdict"]["verdict"] == "confirmed"
  assert summary["entropy/long"]["verdict"]["verdict"] == "confirmed"
  assert summary["entropy/long"]["realformer"][3][0] == pytest.approx(2.501)
  text = (tmp_path / attention_seeds.TABLES).read_text()
  assert "**jsd, long branch** (realformer - post_ln; verdict: confirmed" in (
      text)
  assert "| 0-1 | 0.1010 +- 0.0010 | 0.0510 +- 0.0010 | -0.0500 / " in text
  assert (tmp_path / attention_seeds.PLOT).stat().st_size > 0


def test_run_dir_names_a_sweep_run():
  assert attention_seeds.run_dir("s", "post_ln", 0.005, 3).endswith(
      "runs/post_ln-lr0.005-seed3")
