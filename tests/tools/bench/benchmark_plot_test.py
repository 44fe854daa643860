"""Tests for tools/bench/benchmark_plot.py: reading records of every schema, the
log-log slopes against hand numbers, the summary text and the plot file."""

import json
import math
import os

import pytest

from tools.bench import benchmark_plot
from tools.bench import benchmark_spec

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def rec(length, t, mode="256", variant="v", pass_="fwd", peak=None,
        base=1.0, **extra):
  """A schema-less encoder record with what the slopes read."""
  out = {"record_type": "encoder", "status": "ok", "variant": variant,
         "pass": pass_, "long_len": length, "median_s": t,
         "peak_rss_gib": 1.0 + length / 4096 if peak is None else peak,
         "baseline_rss_gib": base, "global_len_mode": mode}
  out.update(extra)
  return out


def schema2_record(length, median_s, peak, pass_="fwd", global_len=256):
  """A record laid out as `tools.bench.benchmark.make_record` writes it (schema
  2): the spec's fields from `Spec.record_fields`, the configs nested."""
  spec = benchmark_spec.Spec(
      benchmark_spec.RunSpec(kind="encoder", pass_=pass_, long_len=length,
                             global_len=global_len,
                             global_len_mode=str(global_len)),
      etc_config={"hidden_size": 32, "residual_attention": True},
      execution={"att_implementation": "sparse"})
  record = {"schema_version": 2, "record_type": "encoder",
            "variant": benchmark_spec.variant_name(spec), "label": "new"}
  record.update(spec.record_fields())
  record.update(status="ok", median_s=median_s, min_s=median_s,
                peak_rss_gib=peak, baseline_rss_gib=1.0)
  return record


# A schema-1 row (configs' fields at the top level) and an original-ETC row
# (no schema, no baseline, no G mode), trimmed from
# docs/records/benchmarks_cpu.jsonl.
SCHEMA1_ROW = {
    "schema_version": 1, "record_type": "encoder", "status": "ok",
    "variant": "sparse-res-f32-G=L/16", "pass": "fwd", "long_len": 1024,
    "global_len": 64, "global_len_mode": "L/16", "impl": "sparse",
    "residual": True, "dropout": 0.0, "model": {"hidden_size": 768},
    "median_s": 0.25, "peak_rss_gib": 1.5, "baseline_rss_gib": 1.0,
    "label": "old"}
ORIGINAL_ROW = {
    "record_type": "encoder", "status": "ok",
    "variant": "original-etc-sparse-f32-G=L/16", "pass": "fwd",
    "long_len": 1024, "global_len": 64, "impl": "sparse",
    "median_s": 0.5, "peak_rss_gib": 2.0, "label": "old-original"}


def _write_jsonl(path, rows):
  with open(path, "w") as f:
    for r in rows:
      f.write(json.dumps(r) + "\n\n")  # Blank lines are skipped.


def test_slopes_and_target_check():
  records = [rec(2048, 1.0), rec(4096, 2.0), rec(16384, 8.0)]
  s = benchmark_plot.slopes(records)
  assert [(x["from_len"], x["to_len"]) for x in s] == [(2048, 4096),
                                                       (4096, 16384)]
  assert s[0]["time_slope"] == pytest.approx(1.0)
  assert s[0]["act_mem_slope"] == pytest.approx(1.0)
  assert "PASS" in benchmark_plot.slope_summary(records, 1.1)
  steep = [rec(2048, 1.0), rec(16384, 8.0 ** 1.5)]
  assert "FAIL" in benchmark_plot.slope_summary(steep, 1.1)
  grows = [rec(2048, 1.0, "L/16"), rec(16384, 64.0, "L/16")]
  assert "no target" in benchmark_plot.slope_summary(grows, 1.1)


def test_slopes_against_hand_numbers():
  # Time 1 -> 4 -> 8 s; peak 1.5 -> 2 -> 5 GiB over a 1 GiB baseline
  # (activations 0.5 -> 1 -> 4 GiB).
  records = [rec(2048, 1.0, peak=1.5), rec(4096, 4.0, peak=2.0),
             rec(16384, 8.0, peak=5.0)]
  first, second = benchmark_plot.slopes(records)
  assert first["time_slope"] == pytest.approx(2.0)  # 4x over 2x
  assert second["time_slope"] == pytest.approx(0.5)  # 2x over 4x
  assert first["mem_slope"] == pytest.approx(math.log2(2.0 / 1.5))
  assert second["mem_slope"] == pytest.approx(math.log(2.5) / math.log(4))
  assert first["act_mem_slope"] == pytest.approx(1.0)
  assert second["act_mem_slope"] == pytest.approx(1.0)
  summary = benchmark_plot.slope_summary(records, 1.1).splitlines()
  assert summary[2:4] == [
      "# v                                  fwd          2048-4096    2.00  "
      "0.42  1.00",
      "# v                                  fwd          4096-16384   0.50  "
      "0.66  1.00"]
  # The target is checked end to end (8x over 8x), not per step.
  assert summary[-1] == ("# time slope 2048->16384 v fwd: 1.000 PASS "
                         "(target <= 1.1 with G fixed)")
  assert "PASS" in benchmark_plot.slope_summary(records, 1.0)  # At target.
  assert "FAIL" in benchmark_plot.slope_summary(records, 0.9)


def test_series_keep_ok_encoder_records_last_per_length_per_pass():
  records = [
      rec(1024, 9.0),  # replaced by the later record at 1024
      rec(2048, 2.0),
      rec(1024, 1.0),
      rec(4096, 100.0, status="error"),
      rec(4096, 100.0, record_type="matmul_floor"),
      {"variant": "v", "pass": "fwd", "long_len": 4096, "median_s": 100.0},
      rec(1024, 3.0, pass_="fwd_bwd"), rec(2048, 12.0, pass_="fwd_bwd")]
  s = benchmark_plot.slopes(records)
  assert [(x["pass"], x["from_len"], x["to_len"]) for x in s] == [
      ("fwd", 1024, 2048), ("fwd_bwd", 1024, 2048)]
  assert s[0]["time_slope"] == pytest.approx(1.0)
  assert s[1]["time_slope"] == pytest.approx(2.0)


def test_missing_or_bad_values_give_no_slope():
  # No baseline (the original ETC's rows): no activation slope; a zero or
  # missing time: no time slope.
  records = [rec(1024, 1.0, peak=1.0, base=None),
             rec(2048, 0.0, peak=1.5, base=None),
             rec(4096, None, peak=3.0, base=None)]
  for s in benchmark_plot.slopes(records):
    assert s["time_slope"] is None and s["act_mem_slope"] is None
    assert s["mem_slope"] is not None
  summary = benchmark_plot.slope_summary(records)
  assert "1024-2048     -    0.58   -  \n" in summary
  assert "time slope" not in summary  # 2048 and 16384 are not both there.
  assert benchmark_plot.slope_summary([rec(1024, 1.0)]).endswith(
      "(fewer than two successful lengths per variant)")
  assert benchmark_plot.slopes([]) == []


def test_reads_every_schema_from_jsonl(tmp_path):
  new = [schema2_record(2048, 1.0, 2.0), schema2_record(16384, 8.0, 9.0)]
  assert new[0]["variant"] == "sparse-res-f32-G=256"
  assert new[0]["etc_config"] == {"hidden_size": 32,
                                  "residual_attention": True}
  old_2048 = dict(SCHEMA1_ROW, long_len=2048, median_s=1.0)
  rows = [SCHEMA1_ROW, old_2048, ORIGINAL_ROW,
          dict(ORIGINAL_ROW, long_len=2048, median_s=1.5)] + new
  path = tmp_path / "records.jsonl"
  _write_jsonl(path, rows)
  records = benchmark_plot.read_jsonl(str(path))
  assert records == rows
  by_variant = {(s["variant"], s["from_len"]): s
                for s in benchmark_plot.slopes(records)}
  assert set(by_variant) == {("sparse-res-f32-G=L/16", 1024),
                             ("original-etc-sparse-f32-G=L/16", 1024),
                             ("sparse-res-f32-G=256", 2048)}
  assert by_variant[("sparse-res-f32-G=L/16", 1024)][
      "time_slope"] == pytest.approx(2.0)  # 0.25 -> 1 s over 2x
  assert by_variant[("original-etc-sparse-f32-G=L/16", 1024)][
      "time_slope"] == pytest.approx(math.log2(3.0))
  new_slope = by_variant[("sparse-res-f32-G=256", 2048)]
  assert new_slope["time_slope"] == pytest.approx(1.0)
  assert new_slope["act_mem_slope"] == pytest.approx(1.0)
  summary = benchmark_plot.slope_summary(records)
  assert ("# time slope 2048->16384 sparse-res-f32-G=256 fwd: 1.000 PASS"
          in summary)


def test_plot_writes_a_png(tmp_path):
  records = [schema2_record(1024, 0.5, 1.5), schema2_record(2048, 1.0, 2.0),
             SCHEMA1_ROW, dict(SCHEMA1_ROW, long_len=2048, median_s=1.0),
             {**SCHEMA1_ROW, "pass": "fwd_bwd"}]
  png = tmp_path / "bench.png"
  benchmark_plot.plot(records, str(png), title="unit")
  with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  assert png.stat().st_size > 1000
  empty = tmp_path / "empty.png"
  benchmark_plot.plot([rec(1024, 1.0, status="timeout")], str(empty))
  assert empty.stat().st_size > 1000  # An empty plot, not a crash.


def test_main_filters_labels_and_writes_the_plot(tmp_path, capsys):
  rows = [SCHEMA1_ROW, dict(SCHEMA1_ROW, long_len=2048, median_s=1.0),
          schema2_record(2048, 1.0, 2.0), schema2_record(4096, 1.5, 2.0),
          dict(SCHEMA1_ROW, long_len=2048, median_s=0.5, label="other")]
  path, png = tmp_path / "records.jsonl", tmp_path / "p.png"
  _write_jsonl(path, rows)
  benchmark_plot.main([f"--input={path}", "--label=old,new",
                       f"--plot={png}"])
  out = capsys.readouterr().out
  assert "sparse-res-f32-G=L/16" in out and "sparse-res-f32-G=256" in out
  assert "1024-2048    2.00" in out  # Not the "other" label's 0.5 s.
  assert out.rstrip().endswith(f"# plot: {png}")
  assert png.exists()
  benchmark_plot.main([f"--input={path}", "--label=new"])
  out = capsys.readouterr().out
  assert "G=L/16" not in out and "2048-4096" in out
  assert "# plot" not in out


def test_earlier_records_still_plot_and_summarise(tmp_path):
  # The checked-in records (schema 1: the configs' fields at the top level)
  # beside a new one.
  old = benchmark_plot.read_jsonl(os.path.join(REPO, "docs", "records",
                                               "benchmarks_cpu.jsonl"))
  # Schema 1, and the original ETC's rows (no schema).
  assert {r.get("schema_version") for r in old} == {1, None}
  label = old[0]["label"]
  same = [r for r in old if r.get("label") == label]
  summary = benchmark_plot.slope_summary(same)
  assert old[0]["variant"] in summary
  png = tmp_path / "old.png"
  benchmark_plot.plot(same + [schema2_record(2048, 1.0, 2.0)], str(png))
  assert png.stat().st_size > 1000
