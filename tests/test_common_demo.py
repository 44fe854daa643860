"""tasks/common/demo.py: the demos' shared layout, stats lines and gin setup."""

import os

import gin

from tasks.common import demo as demo_lib


class _Stats:
  examples_written = 7
  examples_truncated = 1
  num_skipped = 2


def test_dirs_under_output_dir(tmp_path):
  dirs = demo_lib.DemoDirs.under(str(tmp_path / "out"))
  root = os.path.abspath(str(tmp_path / "out"))
  assert (dirs.output, dirs.data, dirs.model, dirs.export, dirs.gin) == (
      root, os.path.join(root, "data"), os.path.join(root, "model"),
      os.path.join(root, "export"), os.path.join(root, "demo.gin"))


def test_featurize_splits_calls_each_split_and_prints_its_stats(capsys):
  calls = []

  def preprocess_file(path, data_dir, featurizer):
    calls.append((path, data_dir, featurizer))
    return _Stats()

  demo_lib.featurize_splits({"train": "t.json", "dev": "d.json"}, "DATA",
                            "F", preprocess_file)
  assert calls == [("t.json", "DATA", "F"), ("d.json", "DATA", "F")]
  out = capsys.readouterr().out.splitlines()
  assert out == ["demo | train: 7 examples (1 truncated, 2 skipped)",
                 "demo | dev: 7 examples (1 truncated, 2 skipped)"]


@gin.configurable
def _demo_probe(value=0):
  return value


def test_configure_gin_writes_the_file_and_user_bindings_win(tmp_path):
  dirs = demo_lib.DemoDirs.under(str(tmp_path))
  try:
    demo_lib.configure_gin(dirs, "_demo_probe.value = 1\n",
                           gin_bindings=["_demo_probe.value = 2"])
    with open(dirs.gin) as f:
      assert f.read() == "_demo_probe.value = 1\n"
    assert _demo_probe() == 2
  finally:
    gin.clear_config()


def test_stopwatch_laps_and_total():
  clock = demo_lib.Stopwatch()
  clock.lap("data")
  clock.lap("train_and_eval")
  summary = clock.summary()
  assert list(summary) == ["data", "train_and_eval", "total"]
  assert summary["total"] >= summary["data"] >= 0.0


def test_trainer_gin_parses_and_binds_the_steps():
  text = demo_lib.trainer_gin(123)
  assert "TrainerConfig.train_steps = 123" in text
  assert "TrainerConfig.eval_interval = 123" in text
