"""The GPU harness's round trip on the CPU: TensorFlow's XLA module of the
encoder step, exported, then compiled and run by jaxlib alone, gives
TensorFlow's value."""

import json
import os
import subprocess
import sys

import pytest

from tools import xla_runner

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  out = tmp_path_factory.mktemp("xla")
  result = subprocess.run(
      [sys.executable, "-m", "tools.benchmark", "--mode=xla_export",
       f"--export_dir={out}", "--lengths=40", "--global_len=4",
       "--num_layers=2", "--hidden_size=16", "--num_heads=2",
       "--intermediate_size=32", "--local_radius=3", "--vocab_size=50",
       "--passes=fwd_bwd", "--xla_reference=on", "--repeats=1",
       "--warmup=1"], cwd=REPO, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  dirs = [os.path.join(out, d) for d in os.listdir(out)]
  assert len(dirs) == 1, result.stdout
  return dirs[0]


def test_export_writes_module_inputs_and_argument_list(exported):
  with open(os.path.join(exported, "manifest.json")) as f:
    manifest = json.load(f)
  names = [a["name"] for a in manifest["arguments"]]
  # Features first (tf.nest order: sorted keys), then the variables.
  assert names[0] == "feature/g2g_att_mask"
  assert names.index("feature/token_ids") < min(
      i for i, n in enumerate(names) if n.startswith("variable/"))
  assert any("relative_emb_table" in n for n in names)
  assert manifest["spec"]["pass"] == "fwd_bwd"
  assert "reference_value" in manifest


def test_jaxlib_runs_the_module_to_tensorflows_value(exported):
  record = xla_runner.run(exported, repeats=2, warmup=1, platform="cpu",
                          with_hlo_stats=True)
  assert record["platform"] == "cpu"
  assert record["relative_difference"] < 1e-5, record
  assert len(record["times_s"]) == 2 and record["median_s"] > 0
  assert record["hlo_stats"]["fusions"] > 0
  assert record["hlo_stats"]["largest_buffers"]
  assert record["hlo_stats"]["written_buffers"] > 0
  assert record["hlo_stats"]["buffer_groups"]


def test_cli_prints_one_record_and_refuses_a_bad_directory(exported,
                                                           tmp_path):
  result = subprocess.run(
      [sys.executable, "-m", "tools.xla_runner", f"--module_dir={exported}",
       "--repeats=1", "--warmup=1", "--device=cpu"], cwd=REPO,
      capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  record = json.loads(result.stdout.strip().splitlines()[-1])
  assert record["record_type"] == "xla_run"
  bad = subprocess.run(
      [sys.executable, "-m", "tools.xla_runner", f"--module_dir={tmp_path}"],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert bad.returncode == 2 and "manifest.json" in bad.stderr


_HLO = """HloModule m

%fused_computation (p0: f32[4,8]) -> f32[4,8] {
  %p0 = f32[4,8]{1,0} parameter(0)
  %inside = f32[4,8]{1,0} exponential(%p0)
  ROOT %twice = f32[4,8]{1,0} add(%inside, %inside)
}

%body (t: (s32[], f32[16])) -> (s32[], f32[16]) {
  %t = (s32[], f32[16]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %v = f32[16]{0} get-tuple-element(%t), index=1
  %w = f32[16]{0} negate(%v), metadata={op_name="loop/Neg"}
  ROOT %r = (s32[], f32[16]{0}) tuple(%i, %w)
}

ENTRY %main (a: f32[4,8], b: (s32[], f32[16])) -> f32[4,8] {
  %a = f32[4,8]{1,0} parameter(0)
  %b = (s32[], f32[16]{0}) parameter(1)
  %loop = (s32[], f32[16]{0}) while(%b), condition=%cond, body=%body
  %d = bf16[4,8]{1,0} convert(%a), metadata={op_name="model/Cast"}
  ROOT %f = f32[4,8]{1,0} fusion(%a), kind=kLoop, calls=%fused_computation
}
"""


def test_written_buffers_skip_fusion_internals_and_follow_loops():
  written = xla_runner.materialized_buffers(_HLO)
  by_name = {b["name"]: b for b in written}
  # The fusion writes its output once; what it computes inside is not
  # written. The loop body's negate is; parameters and tuples are not.
  assert sorted(by_name) == ["d", "f", "w"]
  assert by_name["f"]["bytes"] == 4 * 8 * 4
  assert by_name["d"]["bytes"] == 4 * 8 * 2
  assert by_name["w"]["op_name"] == "loop/Neg"


def test_kernel_summary_per_call_by_kind_and_longest():
  events = [("loop_add_fusion_3", 4e6), ("loop_add_fusion_3", 4e6),
            ("sm90_xmma_gemm_bf16bf16", 10e6),
            ("sm90_xmma_gemm_bf16bf16", 10e6),
            ("input_reduce_fusion", 2e6), ("input_reduce_fusion", 2e6),
            ("Memcpy DtoD", 1e6), ("nvjet_sm90_tst_128x160_h_bz_TNT", 2e6),
            ("wrapped_transpose", 2e6)]
  summary = xla_runner.kernel_summary(
      events, runs=2, op_names={"loop_add_fusion_3": "layer_0/add"})
  assert summary["kernel_ms_per_call"] == 18.5
  assert summary["kernels_per_call"] == 4.5
  kinds = {k["kind"]: k for k in summary["by_kind"]}
  assert kinds["gemm"]["ms"] == 11.0 and kinds["loop"]["ms"] == 4.0
  assert kinds["transpose"]["ms"] == 1.0
  assert kinds["input"]["ms"] == 2.0 and kinds["copy"]["ms"] == 0.5
  assert abs(sum(k["share"] for k in summary["by_kind"]) - 1) < 1e-2
  longest = summary["longest"]
  assert [k["kernel"] for k in longest][:2] == ["sm90_xmma_gemm_bf16bf16",
                                                "loop_add_fusion_3"]
  assert longest[1]["op_name"] == "layer_0/add"
  assert longest[1]["per_call"] == 1.0


def test_profile_on_a_platform_without_device_kernels(exported):
  # The CPU's trace has no device plane: the summary says so instead of
  # failing the run.
  record = xla_runner.run(exported, repeats=1, warmup=1, platform="cpu",
                          profile_runs=1)
  assert record["kernel_profile"]["runs"] == 1
  assert "note" in record["kernel_profile"]


def test_trace_kernels_reads_device_streams_only():
  # An XSpace as the profiler writes it, built with TensorFlow's own
  # protocol buffer classes; the runner decodes it without them.
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  space = xplane_pb2.XSpace()
  host = space.planes.add(name="/host:CPU")
  host.event_metadata[1].name = "host_op"
  host.lines.add(name="Stream #1").events.add(metadata_id=1,
                                              duration_ps=9_000_000)
  gpu = space.planes.add(name="/device:GPU:0")
  gpu.event_metadata[7].name = "loop_add_fusion_3"
  gpu.event_metadata[300].name = "sm90_xmma_gemm"
  stream = gpu.lines.add(name="Stream #13(Compute)")
  stream.events.add(metadata_id=7, offset_ps=5, duration_ps=2_500_000)
  stream.events.add(metadata_id=300, offset_ps=9, duration_ps=4_000_000)
  derived = gpu.lines.add(name="XLA Ops")
  derived.events.add(metadata_id=7, duration_ps=2_500_000)
  events = xla_runner.trace_kernels(space.SerializeToString())
  assert events == [("loop_add_fusion_3", 2500.0), ("sm90_xmma_gemm", 4000.0)]
