"""Tests for tools/gpu_benchmark.sh: the order of its steps and its budget.

A stand-in `python` first on PATH logs each step's command line (and
sleeps for a module named `*slow*`), so the run's plan is checked without
jax, a GPU or the kernels; the summary at the end is the real one.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

STAND_IN = """#!/bin/bash
echo "$*" >>"$STEP_LOG"
case "$*" in
  *tools.gpu_summary*|"-c import tools.xla_runner, tools.gpu_summary")
    exec {python} "$@" ;;
  *"import jax.ffi"*) echo /jax/include ;;
  *slow*) exec sleep 60 ;;
esac
"""


def _run(tmp_path, args, **env):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  python = bin_dir / "python"
  python.write_text(STAND_IN.format(python=sys.executable))
  python.chmod(0o755)
  out = tmp_path / "out"
  out.mkdir()
  log = tmp_path / "steps.log"
  full_env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}",
                  OUT=str(out), STEP_LOG=str(log), PYTHONPATH=ROOT, **env)
  result = subprocess.run(
      ["bash", os.path.join(ROOT, "tools", "gpu_benchmark.sh"), *args],
      cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120)
  steps = [json.loads(line) for line in
           (out / "steps.jsonl").read_text().splitlines()]
  return result, log.read_text().splitlines(), steps, out


def _modules(tmp_path, layout):
  """Module folders, as {dir: [names]}; returns the dirs' paths."""
  paths = []
  for dir_name, names in layout.items():
    for name in names:
      (tmp_path / dir_name / name).mkdir(parents=True)
    paths.append(str(tmp_path / dir_name))
  return paths


def _kernels(tmp_path):
  kernels = tmp_path / "kernels"
  (kernels / "cubins").mkdir(parents=True)
  (kernels / "libetc_attention_ffi.so").write_text("")
  return str(kernels)


def test_steps_run_in_the_order_of_their_worth(tmp_path):
  dirs = _modules(tmp_path, {"twins": ["b", "a"], "goals": ["c"]})
  result, log, steps, out = _run(tmp_path, dirs,
                                 KERNELS_DIR=_kernels(tmp_path))
  assert result.returncode == 0, result.stderr
  tools = [line.split()[1] if line.startswith("-m") else line.split()[0]
           for line in log]
  assert tools == [
      "-c", "-c", "tools.build_kernels", "tools.gpu_kernel_check",
      "tools.gpu_peers", "tools.xla_runner", "tools.xla_runner",
      "tools.xla_runner", "tools.gpu_kernel_check", "tools.gpu_summary"]
  # The check first, without timing; the timing after the modules.
  assert "--no_timing" in log[3] and "--no_check" in log[8]
  # The modules DIR by DIR as given, by name inside each, with the library.
  modules = [line.split("--module_dir=")[1].split()[0] for line in log[5:8]]
  assert modules == [f"{dirs[0]}/a/", f"{dirs[0]}/b/", f"{dirs[1]}/c/"]
  assert all("--ffi_library=" in line for line in log[5:8])
  assert [s["step"] for s in steps] == [
      "library", "kernel_check", "peers", f"module {dirs[0]}/a",
      f"module {dirs[0]}/b", f"module {dirs[1]}/c", "kernel_timing"]
  assert all(s["exit"] == 0 and s["limit_s"] == 300 for s in steps)
  assert "fused kernels: library rebuilt" in result.stderr
  # The summary is printed and kept.
  summary = (out / "summary.txt").read_text()
  assert summary == result.stdout
  assert "step   peers: 0 s, exit 0 (limit 300 s)" in summary.splitlines()


def test_a_spent_budget_cuts_the_step_and_skips_the_rest(tmp_path):
  # 15 s of the budget are the summary's: 4 s for the steps.
  dirs = _modules(tmp_path, {"goals": ["a_slow", "b"]})
  result, log, steps, _ = _run(tmp_path, dirs, DEVICE="cpu",
                               RUN_BUDGET_S="19", MIN_STEP_S="1")
  assert result.returncode == 0, result.stderr
  peers, slow, skipped = steps
  assert peers["step"] == "peers" and peers["exit"] == 0
  assert slow["step"] == f"module {dirs[0]}/a_slow"
  assert slow["exit"] == 124 and slow["limit_s"] <= 4
  assert skipped == {"record_type": "step", "step": f"module {dirs[0]}/b",
                     "skipped": True}
  assert not any(f"{dirs[0]}/b/" in line for line in log)
  assert "--device=cpu" in log[2]
  assert (f"step   module {dirs[0]}/b: skipped, the run's budget was spent"
          in result.stdout)
