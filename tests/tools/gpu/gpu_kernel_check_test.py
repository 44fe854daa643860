"""Tests for tools/gpu/gpu_kernel_check.py on the CPU: the host handlers,
registered into jaxlib from the FFI library, pass the check."""

import json

from etc_realformer.kernels import build
from etc_realformer.kernels import ffi_library
from tools.gpu import gpu_kernel_check
from tools.gpu import gpu_summary


def test_host_handlers_pass_the_check(tmp_path):
  library = ffi_library.load_into_tensorflow()
  out = tmp_path / "kernels.jsonl"
  assert gpu_kernel_check.main([f"--library={library}", "--device=cpu",
                                "--no_timing", f"--output_jsonl={out}"]) == 0
  records = [json.loads(line) for line in out.read_text().splitlines()]
  # 3 dtypes; each branch with streams and dropout, the long branch with
  # recomputed streams, the long branch bare; the forward, then the gradient
  # on its outputs.
  assert len(records) == 24
  forward = [r for r in records if r["kernel"].startswith("branch_forward")]
  backward = [r for r in records if r["kernel"].startswith("branch_backward")]
  assert {r["kernel"] for r in forward} == {
      "branch_forward[long,streams,dropout]",
      "branch_forward[global,streams,dropout]",
      "branch_forward[long,sources=3,dropout]", "branch_forward[long]"}
  assert {r["kernel"] for r in backward} == {
      "branch_backward[long,streams,dropout]",
      "branch_backward[global,streams,dropout]",
      "branch_backward[long,sources=3,dropout]", "branch_backward[long]"}
  assert all(r["ok"] and r["finite"] for r in records)
  assert all(r["masked_rows_zero"] for r in forward)
  float32 = [r for r in forward if r["dtype"] == "float32"]
  assert max(r["ctx_relative_error"] for r in float32) < 1e-5
  assert max(r["new_relative_error"] for r in forward) < 1e-5
  # Every gradient, the read sums' too; none without ids is zeros.
  streams = [r for r in backward if r["streams"]]
  assert all(set(r["grad_relative_errors"]) == set(
      gpu_kernel_check.GRADIENTS) for r in streams)
  bare = [r for r in backward if not r["has_ids"]]
  assert bare and all(r["per_id_zero_without_ids"] for r in bare)
  assert all("per_id" not in r["grad_relative_errors"] for r in bare)
  assert max(r["grad_relative_error"] for r in backward
             if r["dtype"] == "float32") < 1e-5
  # The GPU runs need no cubin beyond the default build's.
  default = {v.name for v in build.default_variants(
      list(build.DTYPES), [64], [32, 0])}
  used = {r["variant"] for r in forward}
  for r in backward:
    used.update(r["variants"])
  assert used <= default
  assert ("branch_forward_bfloat16_d64_r32_dense_f32_1111_drop_rows" in used)
  assert ("branch_backward_keys_bfloat16_d64_r32_band_p2_f32_11_drop_rows" in
          used)
  assert ("branch_backward_keys_bfloat16_d64_r32_band_p2_f32_s0_drop_rows" in
          used)
  assert all("ok=True" in gpu_summary.line(r) for r in records)


def test_streams_in_the_inputs_dtype_pass_the_check():
  # (--low_streams: a build with --stream_dtypes=low.)
  library = ffi_library.load_into_tensorflow()
  reference = gpu_kernel_check.reference
  import jax  # pylint: disable=g-import-not-at-top
  from tools.gpu import xla_runner  # pylint: disable=g-import-not-at-top
  xla_runner.register_ffi_library(library, "cpu")
  case = reference.BranchCase.global_branch(
      batch=1, num_heads=2, global_len=20, long_len=30, size_per_head=16,
      num_ids=5, **gpu_kernel_check.STREAMS)
  record = gpu_kernel_check.check(reference, jax.devices("cpu")[0],
                                  "bfloat16", case, low_streams=True)
  assert record["ok"] and record["low_streams"]
  assert 1e-4 < record["new_relative_error"] < 1e-2  # rounded to bfloat16
  assert record["variant"] == (
      "branch_forward_bfloat16_d16_r8_dense_low_1111_drop_rows")


def test_timing_records_of_both_passes_on_small_shapes():
  # The benchmark's records (forward, backward, the two in one program)
  # on shapes the host handlers run in moments.
  library = ffi_library.load_into_tensorflow()
  reference = gpu_kernel_check.reference
  import jax  # pylint: disable=g-import-not-at-top
  from tools.gpu import xla_runner  # pylint: disable=g-import-not-at-top
  xla_runner.register_ffi_library(library, "cpu")
  records = gpu_kernel_check.time_side(
      reference, jax.devices("cpu")[0], repeats=1, warmup=1, branch="long",
      streams_and_dropout=True, batch=1, long_len=30, local_radius=4,
      global_len=6, passes=("fwd", "bwd", "fwd_bwd"))
  assert [r["kernel"] for r in records] == [
      "branch_forward[long,streams,dropout]",
      "branch_backward[long,streams,dropout]",
      "branch_forward_backward[long,streams,dropout]"]
  fwd, bwd, both = records
  assert both["floor_bytes"] == fwd["floor_bytes"] + bwd["floor_bytes"]
  assert both["flops"] == fwd["flops"] + bwd["flops"] == 3.5 * fwd["flops"]
  assert bwd["variant"].startswith("branch_backward_queries_")
  assert len(both["variants"]) == 4
  for record in records:
    assert record["median_s"] > 0
    assert "ms" in gpu_summary.line(record)


def test_floor_figures_count_every_input_once():
  reference = gpu_kernel_check.reference
  case = reference.BranchCase.long_branch(
      batch=1, num_heads=1, num_blocks=2, block_len=4, global_len=3,
      size_per_head=16, num_ids=5)
  traffic = gpu_kernel_check.side_traffic(case, dtype_bytes=2)
  lp, b, g, d = 8, 4, 3, 16
  qkv = 2 * d * (lp + 2 * (lp + 2 * b) + 2 * g)  # q, band k/v, global k/v
  masks = 4 * lp * (5 + 1) + lp * (16 + g)  # per_id, valid; int8 codes
  written = 2 * d * lp + 4 * lp
  assert traffic["bytes"] == qkv + masks + written
  assert traffic["flops"] == 4 * lp * (3 * b + g) * d
  # The global branch with both streams read and written (float32) and
  # dropout (the seeds): no per_id without ids.
  case = reference.BranchCase.global_branch(
      batch=1, num_heads=1, global_len=4, long_len=6, size_per_head=16,
      has_ids=False, **gpu_kernel_check.STREAMS)
  traffic = gpu_kernel_check.side_traffic(case, dtype_bytes=2)
  n, k2 = 4, 6
  qkv = 2 * d * (n + 2 * n + 2 * k2)
  masks = 4 * n + n * (n + k2)
  streams = 4 * n * (n + k2)
  assert traffic["bytes"] == (qkv + masks + streams + 16 +
                              2 * d * n + 4 * n + streams)
  assert traffic["flops"] == 4 * n * (n + k2) * d
  # Its gradient: the same inputs, ctx, lse, dctx and the emitted sums'
  # gradients read; the inputs' gradients, the read sums' and delta
  # written.
  traffic = gpu_kernel_check.branch_backward_traffic(case, dtype_bytes=2)
  read = qkv + masks + streams + 16 + 2 * (2 * d * n) + 4 * n + streams
  written = qkv + streams + 4 * n
  assert traffic["bytes"] == read + written
  assert traffic["flops"] == 10 * n * (n + k2) * d


def test_a_missing_library_or_an_unknown_dtype_is_one_line(capsys,
                                                           tmp_path):
  assert gpu_kernel_check.main([f"--library={tmp_path}/none.so"]) == 2
  assert "no such file" in capsys.readouterr().err
  library = tmp_path / "lib.so"
  library.write_text("")
  assert gpu_kernel_check.main([f"--library={library}",
                                "--dtypes=float64"]) == 2
  assert "--dtypes float64" in capsys.readouterr().err


def test_a_failing_call_is_recorded_and_the_check_goes_on(tmp_path,
                                                          monkeypatch):
  # A cubin missing on the GPU fails one call: its record says why, and
  # the cases after it still run.
  real_check, real_cases = gpu_kernel_check.check, gpu_kernel_check.check_cases

  def check(reference, device, dtype, case, low_streams):
    if not case.band:
      raise RuntimeError("no cubin branch_forward_float32_x")
    return real_check(reference, device, dtype, case, low_streams)

  monkeypatch.setattr(gpu_kernel_check, "check", check)
  monkeypatch.setattr(gpu_kernel_check, "check_cases",
                      lambda reference: real_cases(reference)[1::-1])
  out = tmp_path / "kernels.jsonl"
  assert gpu_kernel_check.main([
      f"--library={ffi_library.load_into_tensorflow()}", "--device=cpu",
      "--no_timing", "--dtypes=float32", f"--output_jsonl={out}"]) == 1
  records = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r["kernel"] for r in records] == [
      "branch_forward[global,streams,dropout]",
      "branch_backward[global,streams,dropout]",
      "branch_forward[long,streams,dropout]",
      "branch_backward[long,streams,dropout]"]
  assert [r["ok"] for r in records] == [False, True, True, True]
  assert "no cubin branch_forward_float32_x" in records[0]["error"]
  assert gpu_summary.line(records[0]) == (
      "check  branch_forward[global,streams,dropout]: FAILED RuntimeError: "
      "no cubin branch_forward_float32_x")
