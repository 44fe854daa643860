"""The Bazel BUILD file covers every module and test, parses, has no
cycle, and runs each test module through the pytest runner."""

import pathlib
import shutil
import subprocess
import sys

import pytest

from tools import gen_build

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _build_rules():
  """BUILD's py_* rules and test_suites: name -> (kind, attributes)."""
  rules = {}

  def rule(kind):
    def record(**kwargs):
      rules[kwargs["name"]] = (kind, kwargs)
    return record

  namespace = dict(py_library=rule("py_library"), py_binary=rule("py_binary"),
                   py_test=rule("py_test"), test_suite=rule("test_suite"),
                   filegroup=lambda **_: None, package=lambda **_: None,
                   licenses=lambda *_: None, glob=lambda *_: [])
  exec(compile((ROOT / "BUILD").read_text(), "BUILD", "exec"), namespace)
  return rules


def _build_srcs():
  return {src for _, attrs in _build_rules().values()
          for src in attrs.get("srcs") or []}


def _dep_graph(rules):
  """Target name -> the names of the BUILD targets it depends on."""
  return {name: [d[1:] for d in attrs.get("deps", []) if d[1:] in rules]
          for name, (kind, attrs) in rules.items() if kind.startswith("py_")}


def _closure(graph, name):
  seen, todo = set(), [name]
  while todo:
    node = todo.pop()
    if node not in seen:
      seen.add(node)
      todo.extend(graph[node])
  return seen


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


def test_build_graph_has_no_cycle():
  # What Bazel sees, package edges (a module -> its package's target)
  # included: Bazel analyses none of the targets on a cycle.
  rules = _build_rules()
  assert gen_build.find_cycles(_dep_graph(rules)) == []


def test_package_edges_are_kept_where_they_close_no_cycle():
  rules = _build_rules()
  deps = {name: attrs.get("deps", []) for name, (_, attrs) in rules.items()}
  # etc_realformer/__init__.py imports config: no edge back ...
  assert ":etc_realformer_config" in deps["etc_realformer"]
  assert ":etc_realformer" not in deps["etc_realformer_config"]
  # ... but a module the `__init__` does not import has one.
  assert ":etc_realformer_networks" in deps["etc_realformer_networks_etc_model"]
  assert ":etc_realformer" in deps["etc_realformer_networks"]


def test_lazy_names_are_deps_of_their_importers_not_of_the_init():
  graph = gen_build.Graph()
  assert (graph.lazy["etc_realformer.EtcModel"] ==
          "etc_realformer.networks.etc_model")
  assert "etc_realformer.networks.etc_model" not in graph.deps["etc_realformer"]
  files = gen_build.source_files() + gen_build.test_files() + [
      ROOT / rel for rel in gen_build.test_support_files()]
  importers = 0
  for path in files:
    names, _, _ = gen_build._parse(path)  # pylint: disable=protected-access
    lazy = {graph.lazy[n] for n in names if n in graph.lazy}
    assert lazy <= graph.file_deps(path), path
    importers += bool(lazy)
  assert importers  # `from etc_realformer import EtcModel` is common


def test_parse_reads_a_lazy_table(tmp_path, monkeypatch):
  monkeypatch.setattr(gen_build, "ROOT", tmp_path)
  package = tmp_path / "pkg"
  package.mkdir()
  init = package / "__init__.py"
  init.write_text(
      "import etc_realformer\n"
      "from etc_realformer import errors\n"
      "_LAZY = {'Model': 'etc_realformer.networks.etc_model'}\n"
      "LOADED = 'tasks.run'\n"
      "etc_realformer.EtcModel\n")
  names, written, lazy = gen_build._parse(init)  # pylint: disable=protected-access
  # A string outside the lazy table is an import (for importlib).
  assert names == {"etc_realformer", "etc_realformer.errors", "tasks.run"}
  assert written == {"etc_realformer.EtcModel"}
  assert lazy == {"pkg.Model": "etc_realformer.networks.etc_model"}


def test_roots_hold_every_init_python_runs():
  # A py_test's or py_binary's runfiles: the srcs of its closure. Each
  # module there needs its packages' __init__.py there too.
  rules = _build_rules()
  graph = _dep_graph(rules)
  for name, (kind, _) in rules.items():
    if kind not in ("py_test", "py_binary"):
      continue
    srcs = {src for target in _closure(graph, name)
            for src in rules[target][1].get("srcs", [])}
    for src in srcs:
      if not src.startswith(gen_build.PACKAGES):
        continue
      parent = pathlib.Path(src).parent
      while parent != pathlib.Path("."):
        init = str(parent / "__init__.py")
        if (ROOT / init).exists():
          assert init in srcs, f"{name}: {src} without {init}"
        parent = parent.parent


def test_every_py_test_runs_its_module_through_the_runner():
  tests = {name: attrs for name, (kind, attrs) in _build_rules().items()
           if kind == "py_test"}
  assert len(tests) == len(gen_build.test_files())
  for name, attrs in tests.items():
    assert attrs["main"] == gen_build.RUNNER, name
    (test_file,) = attrs["args"]
    assert test_file.endswith("_test.py") and (ROOT / test_file).exists()
    assert set(attrs["srcs"]) == {test_file, gen_build.RUNNER}, name
    assert "pytest.ini" in attrs["data"], name


def test_library_unit_tests_are_library_tests():
  rules = _build_rules()
  kind, attrs = rules["library_unit_tests"]
  assert kind == "test_suite"
  assert len(attrs["tests"]) == len(gen_build.UNIT_TESTS)
  for test in attrs["tests"]:
    test_kind, test_attrs = rules[test[1:]]
    assert test_kind == "py_test"
    assert test_attrs["args"][0].startswith("tests/etc_realformer/")


@pytest.mark.parametrize("body, code", [
    ("def test_ok():\n  assert True\n", 0),
    ("def test_fails():\n  assert False\n", 1),
    ("X = 1\n", 5),  # no test: pytest's "no tests collected"
])
def test_runner_exits_with_pytest_code(tmp_path, body, code):
  test_file = tmp_path / "some_test.py"
  test_file.write_text(body)
  result = subprocess.run(
      [sys.executable, str(ROOT / gen_build.RUNNER), test_file.name,
       "-p", "no:cacheprovider"],
      cwd=tmp_path, capture_output=True, text=True, timeout=120,
      env={"PATH": "/usr/bin:/bin", "TEST_TMPDIR": str(tmp_path)})
  assert result.returncode == code, result.stdout + result.stderr


def test_runner_refuses_a_missing_file(tmp_path):
  result = subprocess.run(
      [sys.executable, str(ROOT / gen_build.RUNNER), "nothing_test.py"],
      cwd=tmp_path, capture_output=True, text=True, timeout=120)
  assert result.returncode == 2
  assert "usage" in result.stderr


def test_bazel_files_ignore_the_venv_and_outputs():
  ignored = (ROOT / ".bazelignore").read_text().split()
  assert ".venv" in ignored
  assert "bazel-*" in (ROOT / ".gitignore").read_text().split()
  workspace = (ROOT / "WORKSPACE").read_text()
  for repository in ("rules_cc", "rules_java", "remote_coverage_tools"):
    assert f'name = "{repository}"' in workspace
    assert (ROOT / "third_party" / "bazel" / repository / "WORKSPACE").exists()
