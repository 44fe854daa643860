"""Tests for tools/gpu/gpu_summary.py: one line per harness record."""

import json

from tools.gpu import gpu_summary


def test_one_line_per_record(tmp_path, capsys):
  records = [
      {"record_type": "kernel_check", "kernel": "long_branch_forward",
       "dtype": "bfloat16", "has_ids": True, "ctx_relative_error": 2e-3,
       "lse_relative_error": 1e-7, "ok": True},
      {"record_type": "kernel_check", "kernel": "branch_backward[long]",
       "dtype": "float32", "has_ids": True, "ctx_relative_error": 4e-7,
       "lse_relative_error": 1e-7, "grad_relative_error": 3e-7, "ok": True},
      {"record_type": "kernel_timing", "kernel": "long_branch_forward",
       "dtype": "bfloat16", "batch": 4, "long_len": 4096, "global_len": 256,
       "median_s": 0.001, "achieved_gb_per_s": 193.0,
       "achieved_tflop_per_s": 25.6,
       "cubins": {"tiles": {"block_m": 64, "block_n": 64}}},
      {"record_type": "xla_run", "module_dir": "mods/a-fused/",
       "median_s": 0.0295, "min_s": 0.0294, "peak_memory_gib": 1.0,
       "value": 0.0016, "hlo_stats": {"written_mib": 3072.0,
                                      "custom_call_mib": {
                                          "etc_branch_forward": 1024.0,
                                          "etc_branch_backward": 512.0,
                                          "__cublas$gemm": 1024.0}}},
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
  goals = [l for l in lines if l.startswith("goal")]
  lines = [l for l in lines if not l.startswith("goal")]
  assert len(goals) == len(gpu_summary.GOALS)
  assert all("no module run" in l for l in goals)
  assert len(lines) == 6
  assert "ok=True" in lines[0] and "2.00e-03" in lines[0]
  assert "grad_err" not in lines[0]
  assert "grad_err=3.00e-07" in lines[1]
  assert "block_m=64" in lines[2] and "1.000 ms" in lines[2]
  assert lines[3].startswith("module a-fused: 29.50 ms")
  assert lines[3].endswith("writes 3.0 GiB (1.5 GiB by the kernels)")
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
  lines = [l for l in capsys.readouterr().out.splitlines()
           if not l.startswith("goal")]
  assert len(lines) == 4  # three modules; one of them has a twin
  assert lines[3].startswith("fused  a-res-fused-G=256-L4096-fwd")
  assert "1.0e-04 relative" in lines[3]


def _spec(pass_, long_len, global_len, batch, kernel="fused", layers=12,
          residual=True, **execution):
  return {"pass": pass_, "long_len": long_len, "global_len": global_len,
          "batch_size": batch, "dtype": "mixed_bfloat16",
          "etc_config": {"num_hidden_layers": layers, "hidden_size": 768,
                         "residual_attention": residual,
                         "grad_checkpointing_period": 0},
          "execution": {"attention_kernel": kernel, "stream_dtype": "float32",
                        **execution}}


def _run(spec, ms, gib):
  return {"record_type": "xla_run", "module_dir": "m/x/", "spec": spec,
          "median_s": ms / 1e3, "min_s": ms / 1e3, "value": 1.0,
          "peak_memory_gib": gib}


def test_goals_against_dense_sdpa_in_the_same_run():
  records = [
      _run(_spec("fwd_bwd", 4096, 256, 4), 52.0, 7.5),
      _run(_spec("fwd_bwd", 4096, 256, 4, recompute_residual_streams=True),
           60.0, 5.0),
      _run(_spec("fwd_bwd", 4096, 256, 4, kernel="xla"), 108.0, 20.0),
      # Off the spec: residual attention off, or 2 layers.
      _run(_spec("fwd_bwd", 16384, 1024, 1, residual=False), 1.0, 1.0),
      _run(_spec("fwd_bwd", 16384, 256, 1, layers=2), 1.0, 1.0),
      _run(_spec("fwd", 4096, 256, 4), 20.0, 1.0),
      _run(_spec("fwd", 4096, 256, 4, kernel="xla"), 40.0, 1.4),
      {"record_type": "gpu_peer", "model": "bert_sdpa", "pass": "fwd_bwd",
       "long_len": 4096, "batch_size": 4, "median_s": 0.0696,
       "status": "ok"},
      # Another model's time is not the dense baseline.
      {"record_type": "gpu_peer", "model": "bigbird", "pass": "fwd_bwd",
       "long_len": 16384, "batch_size": 1, "median_s": 0.5, "status": "ok"},
  ]
  lines = gpu_summary.goal_lines(records)
  assert len(lines) == 7
  summed, recomputed, xla, long_1024, long_256, fwd, fwd_xla = lines
  assert summed.startswith("goal   fwd_bwd 4096/256/4 [fused]: 52.00 ms")
  assert "0.75x dense SDPA (69.60 ms; goal <= 0.8x: met)" in summed
  assert "7.50 GiB (goal <= 8: met)" in summed
  assert "[fused, recomputed streams]" in recomputed
  assert "0.86x dense SDPA" in recomputed and "0.8x: not met" in recomputed
  assert "[xla]" in xla and "20.00 GiB (goal <= 8: not met)" in xla
  assert long_1024 == "goal   fwd_bwd 16384/1024/1: no module run at this spec"
  assert long_256 == "goal   fwd_bwd 16384/256/1: no module run at this spec"
  assert "goal <= 22 ms on an H100: met" in fwd
  assert "0.50x this run's XLA module (goal <= 0.54x: met)" in fwd
  # The XLA module is not set against itself.
  assert fwd_xla.startswith("goal   fwd 4096/256/4 [xla]: 40.00 ms")
  assert "this run's XLA module" not in fwd_xla


def test_failed_timings_and_the_runs_steps():
  assert gpu_summary.line({
      "record_type": "kernel_timing", "branch": "long",
      "streams_and_dropout": True, "num_sources": 11,
      "error": "XlaRuntimeError: no cubin"}) == (
          "timing long branch, streams and dropout True, sources 11: FAILED "
          "XlaRuntimeError: no cubin")
  assert gpu_summary.line({"record_type": "step", "step": "peers",
                           "seconds": 41, "exit": 0, "limit_s": 300}) == (
                               "step   peers: 41 s, exit 0 (limit 300 s)")
  assert gpu_summary.line({"record_type": "step", "step": "module m/a",
                           "skipped": True}) == (
                               "step   module m/a: skipped, the run's "
                               "budget was spent")
  assert gpu_summary.line({"record_type": "step", "step": "peers",
                           "skipped": True, "asked": True}) == (
                               "step   peers: skipped, as asked "
                               "(SKIP_STEPS)")


def _timing(pass_, tiles, median_s, kernel="branch_forward[long]"):
  return {"record_type": "kernel_timing", "kernel": kernel, "pass": pass_,
          "dtype": "bfloat16", "has_ids": True, "batch": 4,
          "long_len": 4096, "global_len": 256, "median_s": median_s,
          "cubins": {"tiles": {k: dict(block_m=m, block_n=n, num_warps=w)
                               for k, (m, n, w) in tiles.items()}}}


def test_tile_sweep_names_the_fastest_tiles_and_today_s():
  today = {"branch_forward": dict(block_m=32, block_n=64, num_warps=4),
           "branch_backward_queries": dict(block_m=32, block_n=32,
                                           num_warps=4),
           "branch_backward_keys": dict(block_m=32, block_n=64, num_warps=4)}
  default = {k: (v["block_m"], v["block_n"], v["num_warps"])
             for k, v in today.items()}
  wide = {k: (64, 64, 8) for k in today}
  bwd = "branch_backward[long]"
  records = [
      _timing("fwd", default, 0.0009), _timing("fwd", wide, 0.0006),
      _timing("fwd", default, 0.0008),  # a repeat: its best counts
      _timing("bwd", default, 0.002, bwd), _timing("bwd", wide, 0.003, bwd),
      # One build only: no verdict.
      _timing("fwd", default, 0.001, "branch_forward[global]"),
  ]
  assert gpu_summary.tile_lines(records, today) == [
      "tiles  branch_backward[long] bfloat16: fastest 32x32x4/32x64x4 "
      "2.000 ms (today's)",
      "tiles  branch_forward[long] bfloat16: fastest 64x64x8 0.600 ms; "
      "today's 32x64x4 0.800 ms (1.33x)"]
  # Without today's tiles (a partial checkout) the fastest still shows.
  assert gpu_summary.tile_lines(records, {})[1].endswith("0.600 ms")
  # A build that capped the registers is its own entry.
  capped = _timing("fwd", default, 0.0005)
  for shape in capped["cubins"]["tiles"].values():
    shape["maxnreg"] = 168
  assert gpu_summary.tile_lines(records + [capped], today)[1] == (
      "tiles  branch_forward[long] bfloat16: fastest 32x64x4r168 0.500 ms; "
      "today's 32x64x4 0.800 ms (1.60x)")


def test_timings_beside_their_issue_floors():
  shape = dict(batch=4, long_len=4096, global_len=256, num_heads=12)
  floors = [dict(record_type="kernel_floor", variant=v, floor_ms=ms, **shape)
            for v, ms in (("fwd_a", 0.4), ("q_a", 0.6), ("k1_a", 0.25),
                          ("k2_a", 0.15))]
  timing = dict(_timing("fwd", {}, 0.0012), variants=["fwd_a"], **shape)
  backward = dict(_timing("bwd", {}, 0.003, "branch_backward[long]"),
                  variants=["q_a", "k1_a", "k2_a"], **shape)
  # A timing with a cubin no floor names, or at another shape: no line.
  other = dict(_timing("fwd", {}, 0.001), variants=["fwd_b"], **shape)
  smaller = dict(timing, batch=1)
  assert gpu_summary.floor_lines(floors + [timing, backward, other,
                                           smaller]) == [
      "floor  branch_forward[long] bfloat16 fwd: 1.200 ms, issue floor "
      "0.400 ms (3.0x)",
      "floor  branch_backward[long] bfloat16 bwd: 3.000 ms, issue floor "
      "1.000 ms (3.0x)"]
