"""Tests for tools/gpu/xla_runner.py, the GPU harness's round trip on the CPU:
TensorFlow's XLA module of the encoder step, exported, then compiled and
run by jaxlib alone, gives TensorFlow's value."""

import json
import os
import subprocess
import sys

import pytest

from tools.gpu import xla_runner

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  out = tmp_path_factory.mktemp("xla")
  result = subprocess.run(
      [sys.executable, "-m", "tools.bench.benchmark", "--mode=xla_export",
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
      [sys.executable, "-m", "tools.gpu.xla_runner", f"--module_dir={exported}",
       "--repeats=1", "--warmup=1", "--device=cpu"], cwd=REPO,
      capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  record = json.loads(result.stdout.strip().splitlines()[-1])
  assert record["record_type"] == "xla_run"
  bad = subprocess.run(
      [sys.executable, "-m", "tools.gpu.xla_runner",
       f"--module_dir={tmp_path}"],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert bad.returncode == 2 and "manifest.json" in bad.stderr


def test_profile_on_a_platform_without_device_kernels(exported):
  # The CPU's trace has no device plane: the summary says so instead of
  # failing the run.
  record = xla_runner.run(exported, repeats=1, warmup=1, platform="cpu",
                          profile_runs=1)
  assert record["kernel_profile"]["runs"] == 1
  assert "note" in record["kernel_profile"]


def test_the_harness_imports_no_tensorflow():
  # The GPU machine has jax but no TensorFlow.
  code = ("import sys; import tools.gpu.xla_runner; "
          "assert 'tensorflow' not in sys.modules, 'tensorflow imported'; "
          "assert 'jax' not in sys.modules, 'jax imported before a run'")
  result = subprocess.run([sys.executable, "-c", code], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
