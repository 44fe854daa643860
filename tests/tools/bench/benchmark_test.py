"""Tests of `tools.bench.benchmark` at a tiny size: records, plot, failures.

These run the real command (`python -m tools.bench.benchmark`, one worker
process per measurement) and check what it writes; they assert nothing about
timings.
"""

import json
import os
import subprocess
import sys

import pytest

from tools.bench import benchmark
from tools.bench import benchmark_plot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
TINY = ["--hidden_size=32", "--num_heads=2", "--intermediate_size=64",
        "--local_radius=4", "--num_layers=1", "--repeats=2", "--warmup=1"]

MEASUREMENT_FIELDS = (
    "schema_version", "record_type", "timestamp", "variant", "kind", "dtype",
    "xla", "pass", "long_len", "global_len", "global_len_mode",
    "batch_size", "etc_config", "execution", "repeats", "warmup", "status",
    "times_s",
    "median_s", "min_s", "mean_s", "first_call_s", "peak_rss_gib",
    "ru_maxrss_gib", "baseline_rss_gib", "rss_after_import_gib",
    "tokens_per_s", "num_parameters", "tf_version", "machine", "command",
    "wall_s", "meets_record_protocol", "chunk_len_used")


def _run_cli(args, timeout=240):
  """Runs the benchmark CLI the way a user does; returns its stdout."""
  proc = subprocess.run(
      [sys.executable, "-m", "tools.bench.benchmark"] + args, cwd=REPO,
      capture_output=True, text=True, timeout=timeout, check=False)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  return proc.stdout


def _read(path):
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def test_sweep_writes_records_table_and_plot(tmp_path):
  jsonl, png = tmp_path / "bench.jsonl", tmp_path / "bench.png"
  stdout = _run_cli(TINY + ["--lengths=128,256", "--passes=fwd",
                            f"--output_jsonl={jsonl}", f"--plot={png}",
                            "--label=unit-test"])
  records = _read(jsonl)
  assert [r["long_len"] for r in records] == [128, 256]
  for r in records:
    missing = [k for k in MEASUREMENT_FIELDS if k not in r]
    assert not missing, missing
    assert r["status"] == "ok"
    assert r["record_type"] == "encoder" and r["pass"] == "fwd"
    assert r["schema_version"] == 2
    # What controls the run, once: no derived or unread fields.
    assert not {"training", "dropout", "impl", "residual", "model"} & set(r)
    assert r["execution"]["att_implementation"] == "sparse"
    assert r["etc_config"]["residual_attention"] is True
    assert r["global_len"] == r["long_len"] // 16
    assert r["variant"] == "sparse-res-f32-G=L/16"
    assert len(r["times_s"]) == 2
    assert min(r["times_s"]) == r["min_s"] <= r["median_s"]
    assert r["peak_rss_gib"] >= r["baseline_rss_gib"] > 0
    assert r["label"] == "unit-test"
    assert r["meets_record_protocol"] is False  # 2 repeats, L < 1024.
    assert r["etc_config"]["hidden_size"] == 32
    assert r["chunk_len_used"] == 0  # "auto": short inputs run unchunked
  assert png.exists() and png.stat().st_size > 1000
  assert "sparse-res-f32-G=L/16" in stdout
  assert "128-256" in stdout  # The slope line.
  # Appending: a second file-only pass (plot tool) reads the same records.
  summary = benchmark_plot.slope_summary(records)
  assert "128-256" in summary


def test_failing_and_hanging_runs_are_recorded(tmp_path):
  # The hooks fail / hang the worker before TensorFlow is imported: fast.
  jsonl = tmp_path / "bench.jsonl"
  stdout = _run_cli(TINY + ["--lengths=128,256", "--passes=fwd",
                            "--_fail_lengths=128", "--_sleep_lengths=256",
                            "--timeout_per_run=3",
                            f"--output_jsonl={jsonl}",
                            f"--plot={tmp_path / 'p.png'}"], timeout=60)
  failed, hung = _read(jsonl)
  assert failed["status"] == "error" and failed["injected_failure"]
  assert "fail_for_test" in failed["error"]
  assert "median_s" not in failed
  assert hung["status"] == "timeout" and hung["injected_failure"]
  assert 3 <= hung["wall_s"] < 30
  assert "timeout" in stdout and "error" in stdout
  assert (tmp_path / "p.png").exists()  # An empty plot, not a crash.


def test_memory_guard_kills_and_records(tmp_path):
  # Importing TensorFlow alone passes 0.05 GiB, so the guard fires early.
  jsonl = tmp_path / "bench.jsonl"
  stdout = _run_cli(TINY + ["--lengths=128", "--passes=fwd",
                            "--max_rss_gib=0.05", f"--output_jsonl={jsonl}"],
                    timeout=60)
  (record,) = _read(jsonl)
  assert record["status"] == "over_memory"
  assert record["max_polled_rss_gib"] > 0.05
  assert "--max_rss_gib" in record["error_summary"]
  assert "over_memory" in stdout


def _encoder_specs(*flags: str):
  return list(benchmark.encoder_specs(
      benchmark.build_parser().parse_args(list(flags))))


def test_flag_parsing_and_specs():
  specs = _encoder_specs(
      "--lengths=1024,2048", "--impls=sparse,full", "--residual=on,off",
      "--dtypes=float32,mixed_bfloat16", "--xla=off,on",
      "--grad_checkpointing=0,1", "--global_len=256")
  assert len(specs) == 2 * 2 * 2 * 2 * 2 * 2 * 2  # Every axis crossed.
  assert {s.run.global_len for s in specs} == {256}
  names = {benchmark.variant_name(s) for s in specs}
  assert "full-nores-bf16-xla-ckpt1-G=256" in names
  with pytest.raises(SystemExit):
    benchmark.build_parser().parse_args(["--dtypes=float64"])


def test_execution_flags_sweep_config_fields_named_when_not_default():
  specs = _encoder_specs(
      "--lengths=512", "--passes=fwd_bwd", "--attention_chunk_len=-1,256",
      "--softmax_dtype=float32,compute", "--recompute_attention=on",
      "--dropout_rng=hash", "--global_len=64")
  assert len(specs) == 4
  assert specs[0].execution == {
      "att_implementation": "sparse", "recompute_attention": True,
      "attention_chunk_len": "auto", "recompute_residual_streams": False,
      "softmax_dtype": "float32", "stream_dtype": "float32",
      "dropout_rng": "hash", "attention_kernel": "xla"}
  # Chunk lengths vary before the softmax dtype (the flags' order).
  assert [benchmark.variant_name(s) for s in specs] == [
      "sparse-res-f32-recatt-rnghash-G=64",
      "sparse-res-f32-recatt-smxcompute-rnghash-G=64",
      "sparse-res-f32-recatt-rnghash-chunk256-G=64",
      "sparse-res-f32-recatt-smxcompute-rnghash-chunk256-G=64"]
  assert specs[0].run.training and specs[0].run.pass_ == "fwd_bwd"
  assert specs[0].etc_config["num_hidden_layers"] == 2


def test_training_and_export_specs():
  args = benchmark.build_parser().parse_args(
      ["--mode=pretrain", "--finetune_long_len=1024", "--residual=on,off",
       "--finetune_dtypes=mixed_bfloat16", "--export_dir=out"])
  specs = list(benchmark.training_specs(args))
  assert [benchmark.variant_name(s) for s in specs] == [
      "pretrain-res-bf16", "pretrain-nores-bf16"]
  assert specs[0].run.global_len == 64 and specs[0].run.pass_ == "train_step"
  assert specs[0].execution == {"att_implementation": "auto"}
  assert specs[0].run.export_dir.endswith(
      os.path.join("out", "pretrain-res-bf16-L1024-train_step"))
  args = benchmark.build_parser().parse_args(
      ["--mode=xla_export", "--export_dir=out", "--lengths=256",
       "--passes=fwd"])
  (spec,) = benchmark.export_specs(args)
  assert spec.run.xla and spec.run.kind == "xla_export"
  assert spec.run.export_dir.endswith(
      os.path.join("out", "export-sparse-res-f32-xla-G=L_16-L256-fwd"))
  with pytest.raises(SystemExit, match="--export_dir"):
    benchmark.export_specs(benchmark.build_parser().parse_args(
        ["--mode=xla_export"]))


def test_matmul_floor_mode_times_the_steps_products(tmp_path):
  jsonl = tmp_path / "floor.jsonl"
  stdout = _run_cli(TINY + ["--mode=matmul_floor", "--lengths=128",
                            "--passes=fwd_bwd", f"--output_jsonl={jsonl}"])
  (r,) = _read(jsonl)
  assert r["status"] == "ok" and r["record_type"] == "matmul_floor"
  assert r["variant"] == "floor-sparse-res-f32-G=L/16"
  assert r["pass"] == "fwd_bwd"
  assert r["median_s"] > 0 and r["matmul_gflop"] > 0
  assert r["matmul_gflop_per_s"] == pytest.approx(
      r["matmul_gflop"] / r["median_s"])
  assert r["matmul_gflop_by_dtype"].keys() == {"float32"}
  assert r["matmul_skipped_ops"] == {}  # Every product of the step timed.
  # Each forward product comes with its two gradient products (input and
  # weight), so the count is a multiple of 3 here.
  assert r["matmul_count"] % 3 == 0 and r["matmul_count"] >= 30
  assert "matmul floor floor-sparse-res-f32-G=L/16 fwd_bwd L=128" in stdout


@pytest.mark.slow  # a benchmark process and an XLA export (~40 s)
def test_pretrain_mode_times_the_step_and_exports_its_gradient(tmp_path):
  jsonl = tmp_path / "pretrain.jsonl"
  stdout = _run_cli(TINY + [
      "--mode=pretrain", "--finetune_long_len=128", "--vocab_size=500",
      "--finetune_dtypes=float32", "--tokens_per_sentence=8",
      # No --xla_reference: compiling the step for TensorFlow's value costs
      # more than the rest of the test (the export path is the encoder's,
      # whose reference is checked in xla_runner_test).
      f"--export_dir={tmp_path / 'xla'}",
      f"--output_jsonl={jsonl}"])
  (r,) = _read(jsonl)
  assert r["status"] == "ok" and r["record_type"] == "pretrain"
  assert r["variant"] == "pretrain-res-f32"
  assert (r["long_len"], r["global_len"]) == (128, 8)
  # Sentences of 4-12 pieces fill the 8 global tokens before the 128 long.
  assert r["real_global_tokens"] == 8
  assert 8 * 4 <= r["real_long_tokens"] <= 8 * 12
  assert r["mlm_predictions"] > 0 and r["cpc_sentences"] > 0
  assert r["examples_per_s"] == pytest.approx(1 / r["median_s"])
  assert r["tokens_per_s"] == pytest.approx(
      r["real_long_tokens"] / r["median_s"])
  assert "lamb" in r["optimizer"]
  with open(os.path.join(r["export_dir"], "manifest.json")) as f:
    manifest = json.load(f)
  names = [a["name"] for a in manifest["arguments"]]
  assert "feature/cpc_token_ids" in names
  assert any("cls_predictions" in n for n in names)
  assert all(a["stored"] for a in manifest["arguments"]
             if a["name"].startswith("feature/"))
  assert os.path.getsize(os.path.join(r["export_dir"], "module.hlo.pb.gz")) > 0
  assert "# pretrain pretrain-res-f32:" in stdout


def test_summary_lines_per_mode():
  finetune = {"status": "ok", "record_type": "finetune", "variant": "wikihop",
              "examples_per_s": 0.0591, "batch_size": 1, "long_len": 4096,
              "global_len": 430, "finetune_head": "task",
              "optimizer": "adamw"}
  assert benchmark.summary_line(finetune).startswith(
      "# finetune wikihop: 0.059 examples/s (batch 1, L=4096, G=430)")
  floor = {"status": "ok", "record_type": "matmul_floor", "variant": "floor",
           "pass": "fwd", "long_len": 4096, "matmul_count": 44,
           "matmul_gflop": 143.56, "median_s": 0.7, "matmul_gflop_per_s": 205.1,
           "matmul_skipped_ops": {"Einsum": 2}}
  assert benchmark.summary_line(floor) == (
      "# matmul floor floor fwd L=4096: 44 products, 143.6 GFLOP in 0.700 s "
      "(205 GFLOP/s); not timed: {'Einsum': 2}")
  assert benchmark.summary_line({"status": "ok",
                                 "record_type": "encoder"}) is None
  assert benchmark.summary_line(dict(floor, status="timeout")) is None


