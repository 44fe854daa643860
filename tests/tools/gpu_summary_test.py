"""Tests for tools/gpu_summary.py: one line per harness record."""

import json

from tools import gpu_summary


def test_one_line_per_record(tmp_path, capsys):
  records = [
      {"record_type": "kernel_check", "kernel": "long_side_forward",
       "dtype": "bfloat16", "has_ids": True, "ctx_relative_error": 2e-3,
       "lse_relative_error": 1e-7, "ok": True},
      {"record_type": "kernel_check", "kernel": "side_backward[long]",
       "dtype": "float32", "has_ids": True, "ctx_relative_error": 4e-7,
       "lse_relative_error": 1e-7, "grad_relative_error": 3e-7, "ok": True},
      {"record_type": "kernel_timing", "kernel": "long_side_forward",
       "dtype": "bfloat16", "batch": 4, "long_len": 4096, "global_len": 256,
       "median_s": 0.001, "achieved_gb_per_s": 193.0,
       "achieved_tflop_per_s": 25.6,
       "cubins": {"tiles": {"block_m": 64, "block_n": 64}}},
      {"record_type": "xla_run", "module_dir": "mods/a-fused/",
       "median_s": 0.0295, "min_s": 0.0294, "peak_memory_gib": 1.0,
       "value": 0.0016},
      {"record_type": "gpu_peer", "model": "bert_sdpa", "pass": "fwd",
       "long_len": 4096, "batch_size": 4, "median_s": 0.0154,
       "status": "ok"},
      {"record_type": "gpu_peer", "model": "bigbird", "pass": "fwd",
       "status": "error", "error": "OOM"},
  ]
  path = tmp_path / "runs.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in records))
  assert gpu_summary.main([str(path), str(tmp_path / "missing.jsonl")]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 6
  assert "ok=True" in lines[0] and "2.00e-03" in lines[0]
  assert "grad_err" not in lines[0]
  assert "grad_err=3.00e-07" in lines[1]
  assert "block_m=64" in lines[2] and "1.000 ms" in lines[2]
  assert lines[3].startswith("module a-fused: 29.50 ms")
  assert "15.40 ms" in lines[4]
  assert "OOM" in lines[5]


def test_fused_modules_against_their_twins(tmp_path, capsys):
  records = [
      {"record_type": "xla_run", "module_dir": f"mods/{name}/",
       "median_s": 0.02, "min_s": 0.02, "value": value}
      for name, value in (("a-res-G=256-L4096-fwd", 2.0),
                          ("a-res-fused-G=256-L4096-fwd", 2.0002),
                          ("b-fused-L512-fwd", 1.0))]
  path = tmp_path / "runs.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in records))
  gpu_summary.main([str(path)])
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 4  # three modules; one of them has a twin
  assert lines[3].startswith("fused  a-res-fused-G=256-L4096-fwd")
  assert "1.0e-04 relative" in lines[3]
