"""Tests for tools/bench/timing.py: the call protocol, the statistics of the
timed calls, and the JSON line each record becomes."""

import json
import os
import subprocess
import sys

import pytest

from tools.bench import timing

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


class FakeClock:
  """`time.perf_counter` advanced only by the step: each call of the step
  takes the next of `durations` seconds."""

  def __init__(self, durations):
    self.now = 100.0
    self.durations = list(durations)
    self.calls = 0

  def perf_counter(self):
    return self.now

  def step(self):
    self.now += self.durations[self.calls]
    self.calls += 1


def test_first_call_is_timed_alone_and_warmup_is_untimed(monkeypatch):
  # First call 5 s (tracing), two more warm-up calls, then four timed ones.
  clock = FakeClock([5.0, 7.0, 7.0, 0.4, 0.1, 0.3, 0.2])
  monkeypatch.setattr(timing.time, "perf_counter", clock.perf_counter)
  out = timing.time_calls(clock.step, warmup=3, repeats=4)
  assert clock.calls == 7
  assert out["first_call_s"] == pytest.approx(5.0)
  assert out["times_s"] == pytest.approx([0.4, 0.1, 0.3, 0.2])
  assert out["median_s"] == pytest.approx(0.25)  # Even count: the mean of two.
  assert out["min_s"] == pytest.approx(0.1)
  assert out["mean_s"] == pytest.approx(0.25)
  assert set(out) == {"first_call_s", "times_s", "median_s", "min_s",
                      "mean_s"}


def test_median_of_an_odd_count_and_no_extra_warmup(monkeypatch):
  # warmup=0 still makes the (timed) first call, and no other untimed one.
  clock = FakeClock([2.0, 3.0, 1.0, 8.0])
  monkeypatch.setattr(timing.time, "perf_counter", clock.perf_counter)
  out = timing.time_calls(clock.step, warmup=0, repeats=3)
  assert clock.calls == 4
  assert out["first_call_s"] == pytest.approx(2.0)
  assert out["times_s"] == pytest.approx([3.0, 1.0, 8.0])
  assert out["median_s"] == pytest.approx(3.0)
  assert out["min_s"] == pytest.approx(1.0)
  assert out["mean_s"] == pytest.approx(4.0)


def test_emit_prints_one_sorted_line_and_appends(tmp_path, capsys):
  path = tmp_path / "out.jsonl"
  timing.emit({"b": 1, "a": [0.5, 0.25], "c": None}, str(path))
  timing.emit({"z": "x"}, str(path))
  out = capsys.readouterr().out
  assert out == '{"a": [0.5, 0.25], "b": 1, "c": null}\n{"z": "x"}\n'
  assert path.read_text() == out  # Appended, one line each.
  with open(path) as f:
    assert [json.loads(line) for line in f] == [
        {"a": [0.5, 0.25], "b": 1, "c": None}, {"z": "x"}]


def test_emit_without_a_file_only_prints(tmp_path, capsys, monkeypatch):
  monkeypatch.chdir(tmp_path)
  timing.emit({"k": 1.5}, None)
  timing.emit({"k": 2.5}, "")
  assert capsys.readouterr().out == '{"k": 1.5}\n{"k": 2.5}\n'
  assert not list(tmp_path.iterdir())


def test_the_module_imports_no_tensorflow():
  # The GPU tools import it on machines without TensorFlow.
  code = ("import sys; import tools.bench.timing; "
          "assert 'tensorflow' not in sys.modules")
  result = subprocess.run([sys.executable, "-c", code], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
  assert result.returncode == 0, result.stderr[-3000:]
