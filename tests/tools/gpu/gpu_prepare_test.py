"""Tests for tools/gpu/gpu_prepare.sh: what it exports and builds, in which
order, and that a missing cubin stops it (a stand-in `python`,
`shell_testing`)."""

from shell_testing import run_script


# The stand-in makes the folders the real steps would write.
MAKE_DIRS = """
  *tools.bench.benchmark*|*tools.kernels.build_kernels*)
    for a in "$@"; do
      case $a in --export_dir=*|--output_dir=*) mkdir -p "${a#*=}" ;; esac
    done ;;
"""


def _flags(line):
  return dict(f[2:].split("=", 1) for f in line.split() if "=" in f)


def test_exports_the_runs_modules_then_builds_and_checks_their_kernels(
    tmp_path):
  result, log = run_script(
      tmp_path, "gpu/gpu_prepare.sh", ["mods", "kern"],
      MAKE_DIRS +
      '*tools.kernels.module_variants*) echo "0 missing from kern/cubins" ;;')
  assert result.returncode == 0, result.stderr
  exports = [_flags(line) for line in log if "tools.bench.benchmark" in line]
  assert [e["export_dir"] for e in exports] == [
      "mods/twins", "mods/goals", "mods/goals", "mods/goals",
      "mods/recomputed", "mods/recomputed", "mods/recomputed", "mods/more",
      "mods/more"]
  # The benchmark's spec: hash dropout (the kernels' generator), weights
  # drawn there; the goals' modules 12 layers in mixed bfloat16, fused.
  assert all(e["dropout_rng"] == "hash" and e["xla_weights"] == "off"
             for e in exports)
  twins, goals, recomputed = exports[0], exports[1:4], exports[4:7]
  assert twins["attention_kernel"] == "xla,fused"
  assert twins["recompute_residual_streams"] == "off,on"
  shapes = {("4096", "256", "4"), ("16384", "1024", "1"),
            ("16384", "256", "1")}
  for group in (goals, recomputed):
    assert all(e["num_layers"] == "12" and e["dtypes"] == "mixed_bfloat16"
               and e["attention_kernel"] == "fused" for e in group)
    assert {(e["lengths"], e["global_len"], e["batch_size"])
            for e in group} == shapes
  assert all(e["recompute_residual_streams"] == "on" for e in recomputed)
  xla, low = exports[7:]
  assert xla["attention_kernel"] == "xla" and xla["passes"] == "fwd,fwd_bwd"
  assert low["attention_kernel"] == "fused"
  assert low["stream_dtype"] == "compute"
  build, *floors, check = log[-5:]
  assert "tools.kernels.build_kernels" in build and _flags(build)["modules"] == "mods"
  # The issue floors of the check's timed calls, beside the cubins.
  assert all("tools.kernels.kernel_sass" in f and _flags(f)["cubin_dir"] ==
             "kern/cubins" and _flags(f)["output_jsonl"] ==
             "kern/floors.jsonl" for f in floors)
  assert [_flags(f).get("streams") for f in floors] == [None, "ss00",
                                                         "0000"]
  assert "--no_dropout" in floors[2]
  assert _flags(check) == {"modules": "mods", "cubins": "kern/cubins"}
  assert "0 missing" in result.stdout and "mods" in result.stdout


def test_a_missing_cubin_or_an_earlier_run_stops_it(tmp_path):
  result, _ = run_script(
      tmp_path, "gpu/gpu_prepare.sh", [],
      MAKE_DIRS + '*tools.kernels.module_variants*) echo "m: 2 cubins"; '
      'echo "  side_x  MISSING"; echo "1 missing from c"; exit 1 ;;')
  assert result.returncode == 1
  # Which one is missing, not only how many.
  assert result.stdout.splitlines()[-2:] == ["  side_x  MISSING",
                                             "1 missing from c"]
  # gpu_modules is there now.
  result, log = run_script(tmp_path, "gpu/gpu_prepare.sh", [])
  assert result.returncode == 2 and not log
  assert "remove it first" in result.stderr
