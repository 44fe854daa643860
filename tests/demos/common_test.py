"""Tests for demos/common.py: the demos' layout, lines, gin setup and the
generators' shared pieces."""

import json
import os

import gin

from demos import common


class _Stats:
  examples_written = 7
  examples_truncated = 1
  num_skipped = 2


def test_dirs_under_output_dir(tmp_path):
  dirs = common.DemoDirs.under(str(tmp_path / "out"))
  root = os.path.abspath(str(tmp_path / "out"))
  assert (dirs.output, dirs.data, dirs.model, dirs.export, dirs.gin) == (
      root, os.path.join(root, "data"), os.path.join(root, "model"),
      os.path.join(root, "export"), os.path.join(root, "demo.gin"))


def test_write_results(tmp_path):
  dirs = common.DemoDirs.under(str(tmp_path))
  path = common.write_results(dirs, {"answer": "café", "seconds": {"a": 1}})
  assert path == os.path.join(dirs.output, "demo_results.json")
  with open(path, encoding="utf-8") as f:
    assert json.load(f) == {"answer": "café", "seconds": {"a": 1}}


def test_featurize_splits_calls_each_split_and_prints_its_stats(capsys):
  calls = []

  def preprocess_file(path, data_dir, featurizer):
    calls.append((path, data_dir, featurizer))
    return _Stats()

  common.featurize_splits({"train": "t.json", "dev": "d.json"}, "DATA", "F",
                          preprocess_file)
  assert calls == [("t.json", "DATA", "F"), ("d.json", "DATA", "F")]
  out = capsys.readouterr().out.splitlines()
  assert out == ["demo | train: 7 examples (1 truncated, 2 skipped)",
                 "demo | dev: 7 examples (1 truncated, 2 skipped)"]


@gin.configurable
def _demo_probe(value=0):
  return value


def test_configure_gin_writes_the_file_and_user_bindings_win(tmp_path):
  dirs = common.DemoDirs.under(str(tmp_path))
  try:
    common.configure_gin(dirs, "_demo_probe.value = 1\n",
                         gin_bindings=["_demo_probe.value = 2"])
    with open(dirs.gin) as f:
      assert f.read() == "_demo_probe.value = 1\n"
    assert _demo_probe() == 2
  finally:
    gin.clear_config()


def test_stopwatch_laps_and_the_timing_line():
  clock = common.Stopwatch()
  clock.lap("data")
  clock.lap("train_and_eval")
  summary = clock.summary()
  assert list(summary) == ["data", "train_and_eval", "total"]
  assert summary["total"] >= summary["data"] >= 0.0
  assert common.timing_line(
      {"data": 12.4, "train_and_eval": 88.0, "total": 188.2}) == (
          "wall time: 188 s (data 12 s, train+eval 88 s)")


def test_print_lines_prints_each_line_once(capsys):
  common.print_lines(["a: 1", "b"])
  assert capsys.readouterr().out == "\ndemo | a: 1\ndemo | b\n"


def test_trainer_gin_binds_the_steps():
  text = common.trainer_gin(123)
  assert "TrainerConfig.train_steps = 123" in text
  assert "TrainerConfig.eval_interval = 123" in text


def test_vocab_size_counts_lines(tmp_path):
  (tmp_path / "vocab.txt").write_text("a\nb\nc\n")
  assert common.vocab_size(str(tmp_path / "vocab.txt")) == 3


def test_name_pools_are_disjoint_deterministic_and_avoid_used_words():
  pools = common.name_pools(5, {"x": 30, "y": 20}, used=("baka",))
  assert [len(pools["x"]), len(pools["y"])] == [30, 20]
  names = pools["x"] + pools["y"]
  assert len(set(names)) == 50 and "baka" not in names
  assert all(n.isalpha() and n.islower() for n in names)
  assert common.name_pools(5, {"x": 30, "y": 20}, used=("baka",)) == pools
  assert common.name_pools(6, {"x": 30})["x"] != pools["x"]


def test_split_rng_depends_on_seed_and_split_only():
  def draw(seed, split):
    return common.split_rng(seed, split).random()

  assert draw(1, "dev") == draw(1, "dev")
  assert len({draw(1, "dev"), draw(1, "train"), draw(2, "dev")}) == 3


def test_write_dataset_writes_arrays_and_the_vocabulary(tmp_path):
  paths = common.write_dataset(
      str(tmp_path / "d"), {"train": ("t.json", [{"a": 1}]),
                            "dev": ("d.json", [])}, ["[PAD]", "x"])
  assert paths == {"train": str(tmp_path / "d" / "t.json"),
                   "dev": str(tmp_path / "d" / "d.json"),
                   "vocab": str(tmp_path / "d" / "vocab.txt")}
  with open(paths["train"]) as f:
    assert json.load(f) == [{"a": 1}]
  with open(paths["vocab"]) as f:
    assert f.read() == "[PAD]\nx\n"
