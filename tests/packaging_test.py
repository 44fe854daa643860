"""The installable package: pyproject.toml's pins equal requirements.txt's
(and the kernels extra requirements-kernels.txt's), the version is one,
the wheel holds the four packages and the gin configs where the runner
looks for them, and the runner finds packaged gin files."""

import os
import re
import subprocess
import sys
import tomllib
import zipfile

import pytest

import etc_realformer
from tasks import run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pins(path):
  out = []
  with open(os.path.join(REPO, path), encoding="utf-8") as f:
    for line in f:
      line = line.split("#")[0].strip()
      if line:
        out.append(line)
  return out


def _project():
  with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
    return tomllib.load(f)["project"]


def test_runtime_pins_are_requirements_txt():
  assert _project()["dependencies"] == _pins("requirements.txt")


def test_kernels_extra_is_requirements_kernels_txt():
  assert _project()["optional-dependencies"]["kernels"] == _pins(
      "requirements-kernels.txt")


def test_every_pin_is_in_the_constraints():
  constraints = {line.split("==")[0].lower().replace("_", "-"): line
                 for line in _pins("constraints.txt")}
  project = _project()
  pins = list(project["dependencies"]) + [
      p for extra in project["optional-dependencies"].values() for p in extra
      if not p.startswith("etc-realformer")]
  for pin in pins:
    name = pin.split("==")[0].lower().replace("_", "-")
    if name in ("torch", "triton"):  # installed with pip, not constrained
      continue
    assert constraints.get(name, "").lower().replace("_", "-") == (
        pin.lower().replace("_", "-")), pin


def test_version():
  assert re.fullmatch(r"\d+\.\d+\.\d+([ab]\d+)?", etc_realformer.__version__)


def test_the_runner_finds_packaged_gin_files(tmp_path, monkeypatch):
  packaged = tmp_path / "tasks"
  (packaged / "gin" / "tasks").mkdir(parents=True)
  monkeypatch.setattr(run, "TASKS_DIR", str(packaged))
  assert run._gin_root() == str(packaged / "gin")  # pylint: disable=protected-access
  # In a checkout: gin/ beside tasks/.
  monkeypatch.undo()
  assert run._gin_root() == os.path.join(REPO, "gin")  # pylint: disable=protected-access


def test_the_wheel_holds_the_packages_and_the_gin_files(tmp_path):
  # Built offline, with the build backend the test extra installs.
  proc = subprocess.run(
      [sys.executable, "-m", "pip", "wheel", "--no-deps",
       "--no-build-isolation", "--no-index", "-q", "-w", str(tmp_path),
       REPO], capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  (wheel,) = [p for p in os.listdir(tmp_path) if p.endswith(".whl")]
  assert wheel.startswith(
      f"etc_realformer-{etc_realformer.__version__}-py3-none-any")
  names = set(zipfile.ZipFile(tmp_path / wheel).namelist())
  for expected in ("etc_realformer/__init__.py", "etc_realformer/version.py",
                   "tasks/run.py", "tasks/wikihop/__main__.py",
                   "tools/checkpoints/convert_checkpoint.py",
                   "tools/checkpoints/lift_checkpoint.py",
                   "demos/wikihop/demo.py", "tasks/gin/tasks/wikihop.gin",
                   "tasks/gin/models/etc_tiny.gin",
                   "tasks/gin/strategies/cpu.gin",
                   "etc_realformer/export/README.md"):
    assert expected in names, expected
  gin_files = {n for n in names if n.endswith(".gin")}
  repo_gin = {os.path.relpath(os.path.join(d, f), REPO).replace(
      os.sep, "/").replace("gin/", "tasks/gin/", 1)
              for d, _, fs in os.walk(os.path.join(REPO, "gin"))
              for f in fs if f.endswith(".gin")}
  assert gin_files == repo_gin
  assert not any(n.startswith("tests/") for n in names)
  metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
  text = zipfile.ZipFile(tmp_path / wheel).read(metadata).decode()
  assert "Requires-Dist: tensorflow==2.20.0" in text
  assert "Provides-Extra: test" in text
