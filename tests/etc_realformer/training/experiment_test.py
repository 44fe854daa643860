"""`run_experiment` under the loop's gin switches on the real WikiHop model:
float16 with loss scaling, bfloat16, XLA and gradient accumulation, a few
steps each, with the training and evaluation histories; restoring a
checkpoint that does not fit the model."""

import json
import os
import tempfile

import gin
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from etc_realformer import cli
from etc_realformer.errors import UserInputError
from etc_realformer.training import experiment
from etc_realformer.training import trainer
from tasks import run
import wikihop_testing


@pytest.fixture(scope="module")
def tiny_gin(tmp_path_factory):
  root = tmp_path_factory.mktemp("switches")
  data_dir = str(root / "data")
  wikihop_testing.write_tiny_wikihop(data_dir, num_train=16, num_dev=8)
  wikihop_testing.preprocess(data_dir)
  return wikihop_testing.tiny_gin(data_dir, str(root / "tiny.gin"), **{
      "etc_config.num_hidden_layers": 1,
      "TrainerConfig.train_steps": 4,
      "TrainerConfig.steps_per_loop": 2,
      "TrainerConfig.checkpoint_interval": 4,
      "TrainerConfig.eval_interval": 4,
  })


@pytest.mark.parametrize("bindings", [
    ["precision.mixed_precision = 'float16'"],
    ["precision.mixed_precision = 'bfloat16'",
     "TrainerConfig.grad_accum_steps = 2"],
    # XLA compilation on a shared CPU takes a minute or more.
    pytest.param(["TrainerConfig.jit_compile = True"],
                 marks=pytest.mark.slow),
], ids=["fp16_loss_scale", "bf16_accumulate", "xla"])
def test_switch_trains_and_evaluates(tiny_gin, tmp_path, bindings):
  run.register_tasks()
  gin.clear_config()
  try:
    run.parse_gin(["tasks/wikihop.gin", tiny_gin], bindings)
    results = run.run("train_and_eval", str(tmp_path / "model"))
  finally:
    gin.clear_config()
    tf_keras.mixed_precision.set_global_policy("float32")
  assert results["global_step"] == 4
  assert np.isfinite(results["loss"])
  assert 0.0 <= results["accuracy"] <= 1.0
  with open(os.path.join(tmp_path, "model", "operative_config.gin")) as f:
    operative = f.read()
  for binding in bindings:
    assert binding.replace(" ", "") in operative.replace(" ", "")
  with open(os.path.join(tmp_path, "model", "eval_results.json")) as f:
    final = json.load(f)
  assert final["step"] == 4
  # The histories: one line per training loop and per evaluation.
  model_dir = os.path.join(tmp_path, "model")
  train = trainer.read_history(
      os.path.join(model_dir, experiment.TRAIN_HISTORY_FILE))
  assert [r["step"] for r in train] == [2, 4]
  assert {"loss", "learning_rate"} <= set(train[-1]["metrics"])
  evals = trainer.read_history(
      os.path.join(model_dir, experiment.EVAL_HISTORY_FILE))
  assert [r["step"] for r in evals] == [4]
  assert evals[0]["metrics"]["accuracy"] == pytest.approx(final["accuracy"])


def test_a_checkpoint_of_another_model_is_named_in_one_line(tmp_path):
  def model(widths):
    m = tf_keras.Sequential([tf_keras.layers.Dense(w, name=f"dense_{i}")
                             for i, w in enumerate(widths)])
    m(tf.zeros([1, 3]))
    return m

  path = tf.train.Checkpoint(model=model([2])).save(str(tmp_path / "ckpt"))
  same = model([2])
  assert experiment.restore_for_inference(same, str(tmp_path), path) == path
  with pytest.raises(UserInputError) as error:
    experiment.restore_for_inference(model([2, 4]), str(tmp_path), path)
  message = str(error.value)
  assert "\n" not in message
  assert message.startswith(f"{path}: the checkpoint does not fit")
  assert "2 of the model's variables" in message
  assert "dense_1/kernel" in message


def test_a_checkpoint_with_other_shapes_is_named_in_one_line(tmp_path):
  def model(width):
    m = tf_keras.Sequential([tf_keras.layers.Dense(width, name="dense")])
    m(tf.zeros([1, 3]))
    return m

  path = tf.train.Checkpoint(model=model(2)).save(str(tmp_path / "ckpt"))
  with pytest.raises(UserInputError) as error:
    experiment.restore_for_inference(model(5), str(tmp_path), path)
  assert "\n" not in str(error.value)
  assert str(error.value).startswith(f"{path}: the checkpoint does not fit")


def test_resuming_with_another_config_is_named_in_one_line(tiny_gin,
                                                          tmp_path):
  model_dir = str(tmp_path / "model")
  run.register_tasks()

  def train(bindings):
    gin.clear_config()
    try:
      run.parse_gin(["tasks/wikihop.gin", tiny_gin], bindings)
      return run.run("train", model_dir)
    finally:
      gin.clear_config()

  train(["TrainerConfig.train_steps = 2",
         "TrainerConfig.checkpoint_interval = 2"])
  latest = tf.train.latest_checkpoint(model_dir)
  assert latest
  with pytest.raises(UserInputError) as error:
    train(["TrainerConfig.train_steps = 4",
           "etc_config.intermediate_size = 48"])
  # What the binaries print (gin adds the configurable's name below).
  line = cli.user_error_line(error.value)
  assert "\n" not in line and "In call to" not in line
  assert line.startswith(f"error: {latest}: the checkpoint does not fit")


class _Resolver:
  """A two-worker cluster's resolver as `experiment` reads it."""

  def __init__(self, task_id):
    self.task_type, self.task_id = "worker", task_id

  def cluster_spec(self):
    return tf.train.ClusterSpec({"worker": ["a:1", "b:2"]})


class _Strategy:

  def __init__(self, task_id):
    self.cluster_resolver = _Resolver(task_id)


def test_a_non_chief_worker_writes_to_a_new_scratch_dir(tmp_path,
                                                         monkeypatch):
  # A worker killed mid-run leaves its scratch dir (and checkpoints) behind;
  # the next worker must not find them, whatever its pid, or it resumes from
  # them instead of the chief's checkpoint.
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  model_dir = str(tmp_path / "model")
  assert experiment._write_dir(model_dir, _Strategy(0)) == model_dir
  first = experiment._write_dir(model_dir, _Strategy(1))
  with open(os.path.join(first, "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "ckpt-8"\n')
  second = experiment._write_dir(model_dir, _Strategy(1))
  assert second != first and os.listdir(second) == []
  assert os.path.dirname(second) == str(tmp_path)


def test_orbit_controller_lines_are_logged_once():
  import logging as logging_lib  # pylint: disable=g-import-not-at-top
  def record(pathname, level=logging_lib.INFO):
    return logging_lib.LogRecord("absl", level, pathname, 1, "train | step",
                                 None, None)
  keep = experiment.OrbitPrintedLines().filter
  # orbit prints these to stdout itself: the log handler drops its copy.
  assert not keep(record(os.path.join("site-packages", "orbit",
                                      "controller.py")))
  assert keep(record(os.path.join("site-packages", "orbit", "controller.py"),
                     logging_lib.WARNING))
  assert keep(record(os.path.join("etc_realformer", "training",
                                  "experiment.py")))
