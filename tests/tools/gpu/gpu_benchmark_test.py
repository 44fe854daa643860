"""Tests for tools/gpu/gpu_benchmark.sh: the order of its steps and its budget.

A stand-in `python` (`shell_testing`) logs each step's command line, so
the run's plan is checked without jax, a GPU or the kernels; the summary
at the end is the real one.
"""

import json
import re

from shell_testing import run_script

# The summary runs for real; a module named *slow* outlasts any budget.
CASES = """
  *tools.gpu.gpu_summary*|"-c import tools.gpu.xla_runner, tools.gpu.gpu_summary")
    exec {python} "$@" ;;
  *"import jax.ffi"*) echo /jax/include ;;
  *slow*) exec sleep 60 ;;
  *tools.gpu.xla_runner*) echo "XLA_FLAGS=${XLA_FLAGS:-}" >>"$STEP_LOG" ;;
  *"jax.jit"*) [ -z "${REFUSE_FLAGS:-}" ] ;;
"""


def _run(tmp_path, args, **env):
  out = tmp_path / "out"
  out.mkdir()
  result, log = run_script(tmp_path, "gpu/gpu_benchmark.sh", args, CASES,
                           OUT=str(out), **env)
  steps = [json.loads(line) for line in
           (out / "steps.jsonl").read_text().splitlines()]
  return result, log, steps, out


def _modules(tmp_path, layout):
  """Module folders (each with its manifest), as {dir: [names]}; returns
  the dirs' paths."""
  paths = []
  for dir_name, names in layout.items():
    (tmp_path / dir_name).mkdir()
    for name in names:
      (tmp_path / dir_name / name).mkdir(parents=True)
      (tmp_path / dir_name / name / "manifest.json").write_text("{}")
    paths.append(str(tmp_path / dir_name))
  return paths


def _kernels(tmp_path):
  kernels = tmp_path / "kernels"
  (kernels / "cubins").mkdir(parents=True)
  (kernels / "libetc_attention_ffi.so").write_text("")
  return str(kernels)


def test_steps_run_in_the_order_of_their_worth(tmp_path):
  # Deeper folders count; one without a manifest does not.
  dirs = _modules(tmp_path, {"twins": ["b", "a"], "goals": ["deeper/c"],
                             "empty": []})
  (tmp_path / "twins" / "notes").mkdir()
  result, log, steps, out = _run(tmp_path, dirs,
                                 KERNELS_DIR=_kernels(tmp_path))
  assert f"no exported module under {dirs[2]}" in result.stderr
  assert result.returncode == 0, result.stderr
  # The interpreter that imports jax is found first.
  assert log[0] == "-c import jax"
  runs = [line for line in log if line.startswith("-m")]
  assert [line.split()[1] for line in runs] == [
      "tools.kernels.build_kernels", "tools.gpu.gpu_kernel_check",
      "tools.gpu.gpu_peers",
      "tools.gpu.xla_runner", "tools.gpu.xla_runner", "tools.gpu.xla_runner",
      "tools.gpu.gpu_kernel_check", "tools.gpu.gpu_summary"]
  # The check first, without timing; the timing after the modules.
  assert "--no_timing" in runs[1] and "--no_check" in runs[6]
  # The modules DIR by DIR as given, by name inside each, with the library.
  modules = [line.split("--module_dir=")[1].split()[0] for line in runs[3:6]]
  assert modules == [f"{dirs[0]}/a/", f"{dirs[0]}/b/",
                     f"{dirs[1]}/deeper/c/"]
  assert all("--ffi_library=" in line for line in runs[3:6])
  # XLA keeps its autotuning results per fusion for every later process.
  flags = [line for line in log if line.startswith("XLA_FLAGS=")]
  assert len(flags) == 3 and len(set(flags)) == 1
  assert "--xla_gpu_per_fusion_autotune_cache_dir=/" in flags[0]
  assert "XLA autotuning: cached per fusion" in result.stderr
  assert [s["step"] for s in steps] == [
      "autotune_cache", "library", "kernel_check", "peers",
      f"module {dirs[0]}/a",
      f"module {dirs[0]}/b", f"module {dirs[1]}/deeper/c", "kernel_timing"]
  assert all(s["exit"] == 0 and s["limit_s"] == 300 for s in steps)
  assert "fused kernels: library rebuilt" in result.stderr
  # The steps' output goes to run.log, a line per step to the terminal.
  assert "== peers" in (out / "run.log").read_text().splitlines()
  # A stand-in step takes 0 s, or a second or more on a loaded machine.
  assert re.search(r"^step peers: \d+ s, exit 0$", result.stderr, re.M)
  # The summary is printed and kept.
  summary = (out / "summary.txt").read_text()
  assert summary == result.stdout
  assert re.search(r"^step   peers: \d+ s, exit 0 \(limit 300 s\)$", summary,
                   re.M)


def test_a_spent_budget_cuts_the_step_and_skips_the_rest(tmp_path):
  # 20 s of the budget are kept for the summary: 4 s for the steps.
  dirs = _modules(tmp_path, {"goals": ["a_slow", "b"]})
  result, log, steps, _ = _run(tmp_path, dirs, DEVICE="cpu",
                               RUN_BUDGET_S="24", MIN_STEP_S="1")
  assert result.returncode == 0, result.stderr
  peers, slow, skipped = steps
  assert peers["step"] == "peers" and peers["exit"] == 0
  assert slow["step"] == f"module {dirs[0]}/a_slow"
  assert slow["exit"] == 124 and slow["limit_s"] <= 4
  assert f"a_slow: {slow['seconds']} s, exit 124 (over its" in result.stderr
  assert skipped == {"record_type": "step", "step": f"module {dirs[0]}/b",
                     "skipped": True}
  assert not any(f"{dirs[0]}/b/" in line for line in log)
  assert f"--module_dir={dirs[0]}/a_slow/ --device=cpu" in "\n".join(log)
  assert (f"step   module {dirs[0]}/b: skipped, the run's budget was spent"
          in result.stdout)


def test_a_jaxlib_that_refuses_the_autotune_flag_runs_without_it(tmp_path):
  dirs = _modules(tmp_path, {"goals": ["a"]})
  result, log, steps, _ = _run(tmp_path, dirs, REFUSE_FLAGS="1",
                               XLA_FLAGS="--xla_dump_to=/tmp/x")
  assert result.returncode == 0, result.stderr
  assert steps[0]["step"] == "autotune_cache" and steps[0]["exit"] == 1
  assert "XLA autotuning: not cached (this jaxlib refused" in result.stderr
  # The caller's own flags reach the modules, without the refused one.
  assert "XLA_FLAGS=--xla_dump_to=/tmp/x" in log


def test_no_autotune_probe_on_the_cpu_or_when_asked(tmp_path):
  dirs = _modules(tmp_path, {"goals": ["a"]})
  for name, env in (("cpu", dict(DEVICE="cpu", XLA_FLAGS="")),
                    ("off", dict(NO_AUTOTUNE_CACHE="1", XLA_FLAGS=""))):
    (tmp_path / name).mkdir()
    _, log, steps, _ = _run(tmp_path / name, dirs, **env)
    assert "autotune_cache" not in [s["step"] for s in steps]
    assert "XLA_FLAGS=" in log


def test_memory_checker_and_counters_run_last_on_request(tmp_path):
  """NCU and SANITIZE: the counters of the timing's first kernels, the
  kernel check under compute-sanitizer (each buffer its own allocation);
  after the profiles, before the summary."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  for tool in ("compute-sanitizer", "ncu"):
    (bin_dir / tool).write_text(
        "#!/bin/bash\necho \"$(basename $0) "
        "allocator=${XLA_PYTHON_CLIENT_ALLOCATOR:-} $*\" >>\"$STEP_LOG\"\n")
    (bin_dir / tool).chmod(0o755)
  dirs = _modules(tmp_path, {"goals": ["a"]})
  result, log, steps, _ = _run(tmp_path, dirs, SANITIZE="1", NCU="1",
                               KERNELS_DIR=_kernels(tmp_path),
                               PROFILE_MODULES=f"{dirs[0]}/a")
  assert result.returncode == 0, result.stderr
  assert [s["step"] for s in steps][-3:] == [f"profile {dirs[0]}/a",
                                             "ncu", "sanitize"]
  sanitizer, = [line for line in log if line.startswith("compute-")]
  assert sanitizer.startswith("compute-sanitizer allocator=platform --tool "
                              "memcheck --error-exitcode 1 python -m "
                              "tools.gpu.gpu_kernel_check")
  assert "--no_timing" in sanitizer
  counters, = [line for line in log if line.startswith("ncu ")]
  assert "--clock-control none --kernel-name regex:branch_" in counters
  assert counters.endswith("--no_check --repeats=1 --warmup=0")
  assert "step ncu:" in result.stderr and "step sanitize:" in result.stderr


def test_steps_named_in_skip_steps_do_not_run(tmp_path):
  """A second call skips what the first brought back; a skipped library
  step leaves the carried build."""
  dirs = _modules(tmp_path, {"goals": ["a"], "more": ["b"]})
  result, log, steps, _ = _run(
      tmp_path, dirs, KERNELS_DIR=_kernels(tmp_path),
      SKIP_STEPS="library,kernel_check,peers,kernel_timing")
  assert result.returncode == 0, result.stderr
  ran = [s["step"] for s in steps if not s.get("skipped")]
  assert ran == ["autotune_cache", f"module {dirs[0]}/a",
                 f"module {dirs[1]}/b"]
  assert [s["step"] for s in steps if s.get("asked")] == [
      "library", "kernel_check", "peers", "kernel_timing"]
  runs = [line.split()[1] for line in log if line.startswith("-m")]
  assert runs == ["tools.gpu.xla_runner", "tools.gpu.xla_runner",
                  "tools.gpu.gpu_summary"]
  assert "fused kernels: using the carried library" in result.stderr
  assert "step   peers: skipped, as asked (SKIP_STEPS)" in result.stdout
