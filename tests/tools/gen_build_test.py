"""The Bazel BUILD file covers every module and test, and parses."""

import pathlib
import shutil
import subprocess

import pytest

from tools import gen_build

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _build_srcs():
  srcs = set()

  def rule(**kwargs):
    srcs.update(kwargs.get("srcs") or [])

  namespace = dict(py_library=rule, py_binary=rule, py_test=rule,
                   filegroup=lambda **_: None, package=lambda **_: None,
                   licenses=lambda *_: None, glob=lambda *_: [])
  exec(compile((ROOT / "BUILD").read_text(), "BUILD", "exec"), namespace)
  return srcs


def test_build_is_up_to_date():
  assert gen_build.main(["--check"]) == 0, (
      "BUILD is stale: run `python -m tools.gen_build`")


def test_unknown_flag_fails_without_writing():
  before = (ROOT / "BUILD").stat().st_mtime_ns
  with pytest.raises(SystemExit) as raised:
    gen_build.main(["--chek"])
  assert raised.value.code == 2
  assert (ROOT / "BUILD").stat().st_mtime_ns == before


def test_every_module_and_test_has_a_target():
  srcs = _build_srcs()
  expected = {str(p.relative_to(ROOT)) for p in gen_build.source_files()}
  expected |= {str(p.relative_to(ROOT)) for p in gen_build.test_files()}
  missing = sorted(expected - srcs)
  assert not missing, f"files without a BUILD target: {missing}"


@pytest.mark.skipif(shutil.which("bazel") is None,
                    reason="bazel not installed (Debian: bazel-bootstrap)")
def test_bazel_query(tmp_path):
  result = subprocess.run(
      ["bazel", f"--output_user_root={tmp_path}", "--batch", "query", "//..."],
      cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "//:etc_realformer_networks_etc_model" in result.stdout


def test_no_import_cycles():
  assert gen_build.import_cycles() == []


def test_cycle_finder_finds_a_cycle():
  graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": []}
  assert gen_build.find_cycles(graph) == [["a", "b", "c", "a"]]
  assert gen_build.find_cycles({"a": ["b"], "b": []}) == []
