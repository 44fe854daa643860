"""`run_experiment` under the loop's gin switches on the real WikiHop model:
float16 with loss scaling, bfloat16, XLA and gradient accumulation, a few
steps each, with the training and evaluation histories; restoring a
checkpoint that does not fit the model, or that cannot be read; one
training per model_dir; a run killed with SIGKILL and resumed that ends as
the uninterrupted run."""

import gc
import json
import os
import tempfile
import time

import gin
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from etc_realformer import cli
from etc_realformer.errors import UserInputError
from etc_realformer.training import experiment
from etc_realformer.training import model_dir_lock
from etc_realformer.training import trainer
from tasks import run
import cli_testing
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


def _train_here(gin_file, model_dir, bindings=()):
  run.register_tasks()
  gin.clear_config()
  try:
    run.parse_gin(["tasks/wikihop.gin", gin_file], list(bindings))
    return run.run("train", model_dir)
  finally:
    gin.clear_config()


def _history_steps(model_dir):
  with open(os.path.join(model_dir, experiment.TRAIN_HISTORY_FILE)) as f:
    return [json.loads(line)["step"] for line in f]


def _truncate(prefix):
  data = prefix + ".data-00000-of-00001"
  with open(data, "r+b") as f:
    f.truncate(os.path.getsize(data) // 2)


def test_a_resume_past_an_unreadable_checkpoint_repeats_no_history(
    tiny_gin, tmp_path, capsys):
  model_dir = str(tmp_path / "model")
  every_2 = ["TrainerConfig.checkpoint_interval = 2"]
  _train_here(tiny_gin, model_dir, every_2)
  assert _history_steps(model_dir) == [2, 4]
  assert "fresh start (no checkpoint in" in capsys.readouterr().out
  # A run killed after logging step 6 but before its checkpoint, whose
  # disk filled up while writing ckpt-4.
  with open(os.path.join(model_dir, experiment.TRAIN_HISTORY_FILE),
            "a") as f:
    f.write('{"metrics": {"loss": 1.0}, "step": 6}\n')
  _truncate(os.path.join(model_dir, "ckpt-4"))
  results = _train_here(tiny_gin, model_dir,
                        every_2 + ["TrainerConfig.train_steps = 6"])
  assert results["global_step"] == 6
  out = capsys.readouterr().out
  assert (f"resumed from step 2 of checkpoint {model_dir}/ckpt-2\n" in out)
  assert _history_steps(model_dir) == [2, 4, 6]


def test_restore_latest_readable(tmp_path):
  variable = tf.Variable(1.0)
  checkpoint = tf.train.Checkpoint(v=variable)
  manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), 3)
  first = manager.save()
  variable.assign(2.0)
  second = manager.save()
  _truncate(second)
  variable.assign(3.0)
  assert experiment.restore_latest_readable(
      checkpoint, manager.checkpoints, str(tmp_path)) == first
  assert variable.numpy() == 1.0
  _truncate(first)
  with pytest.raises(UserInputError,
                     match=f"^model_dir {tmp_path}: none of its checkpoints "
                     "can be read"):
    experiment.restore_latest_readable(checkpoint, manager.checkpoints,
                                       str(tmp_path))


def test_a_checkpoint_flag_that_is_no_checkpoint_is_named(tmp_path):
  model = tf_keras.Sequential([tf_keras.layers.Dense(2)])
  model(tf.zeros([1, 3]))
  notes = tmp_path / "notes.txt"
  notes.write_text("hello")
  (tmp_path / "fake.index").write_text("hello")
  for path, error in ((notes, FileNotFoundError),
                      (tmp_path / "fake", UserInputError),
                      (tmp_path / "empty", FileNotFoundError)):
    (tmp_path / "empty").mkdir(exist_ok=True)
    with pytest.raises(error, match=str(path)):
      experiment.restore_for_inference(model, str(tmp_path), str(path))


def test_a_second_training_into_a_model_dir_exits_2(tiny_gin, tmp_path):
  model_dir = str(tmp_path / "model")
  # An earlier test's restore, collected during the run, would log TF's
  # warning of unrestored values into the one line of stderr.
  gc.collect()
  with model_dir_lock.hold(model_dir):  # a training that is running
    cli_testing.user_error_line_here(
        "tasks.run", ["--gin_file=tasks/wikihop.gin",
                      f"--gin_file={tiny_gin}", "--mode=train",
                      f"--model_dir={model_dir}"],
        f"model_dir {model_dir}: another training", f"(pid {os.getpid()})")
  assert not tf.io.gfile.glob(os.path.join(model_dir, "ckpt-*"))


@pytest.mark.slow  # ~20 s: a process's start, three short trainings
def test_a_run_killed_and_resumed_ends_where_an_uninterrupted_one_ends(
    tiny_gin, tmp_path):
  # A small shuffle buffer over 16 records, 8 a batch: every two steps a
  # new epoch and a new order, so a resume that restarted the input (or
  # its shuffle) would train on other batches.
  steps = 16
  gin_file = wikihop_testing.tiny_gin(
      os.path.join(os.path.dirname(tiny_gin), "data"),
      str(tmp_path / "kill.gin"), **{
          "etc_config.num_hidden_layers": 1,
          "WikiHopTask.shuffle_buffer_size": 8,
          "TrainerConfig.train_steps": steps,
          "TrainerConfig.steps_per_loop": 2,
          "TrainerConfig.checkpoint_interval": 4,
          "TrainerConfig.max_checkpoints_to_keep": 2,
      })
  root = tmp_path
  whole, killed = str(root / "whole"), str(root / "killed")
  process = cli_testing.start("tasks.run", [
      "--gin_file=tasks/wikihop.gin", f"--gin_file={gin_file}",
      "--mode=train", f"--model_dir={killed}"])
  try:
    deadline = time.time() + 120
    while (not tf.train.latest_checkpoint(killed) and
           process.poll() is None and time.time() < deadline):
      time.sleep(0.02)
    process.kill()  # SIGKILL: no handler runs, the OS drops the lock
  finally:
    process.kill()
    process.communicate()
  assert process.returncode == -9
  latest = tf.train.latest_checkpoint(killed)
  assert latest and int(latest.rsplit("-", 1)[1]) < steps

  _train_here(gin_file, whole)
  _train_here(gin_file, killed)  # resumes
  assert _history_steps(killed) == list(range(2, steps + 1, 2))
  # The same loss curve: the killed run's steps, then the resumed ones.
  curves = [[r["metrics"]["loss"] for r in trainer.read_history(
      os.path.join(d, experiment.TRAIN_HISTORY_FILE))] for d in (whole, killed)]
  assert curves[1] == pytest.approx(curves[0], rel=1e-6)
  readers = [tf.train.load_checkpoint(tf.train.latest_checkpoint(d))
             for d in (whole, killed)]
  names = [n for n in readers[0].get_variable_to_shape_map()
           if n.startswith("model/") and "OPTIMIZER_SLOT" not in n]
  assert len(names) > 20
  for name in names:
    a, b = (r.get_tensor(name) for r in readers)
    np.testing.assert_allclose(b, a, rtol=1e-6,
                               atol=1e-6 * float(np.abs(a).max()))


def test_a_checkpoint_without_an_input_position_restores_the_rest(tmp_path):
  # As written before the input iterator was saved with the weights.
  model, optimizer = tf.Variable([1.0, 2.0]), tf.Variable(3.0)
  old = tf.train.Checkpoint(model=model, optimizer=optimizer).save(
      str(tmp_path / "ckpt"))
  model.assign([0.0, 0.0])
  iterator = iter(tf.data.Dataset.range(5))
  checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                   iterator=iterator)
  assert experiment.restore_latest_readable(checkpoint, [old],
                                            str(tmp_path)) == old
  assert model.numpy().tolist() == [1.0, 2.0]
  next(iterator)
  new = checkpoint.save(str(tmp_path / "ckpt"))
  next(iterator)
  experiment.restore_latest_readable(checkpoint, [new], str(tmp_path))
  assert int(next(iterator)) == 1  # the input position came back


def test_a_checkpoint_that_cannot_be_saved_names_its_directory(tmp_path):
  (tmp_path / "file").write_text("x")
  directory = str(tmp_path / "file" / "model")
  step = tf.Variable(3, dtype=tf.int64)
  manager = experiment.CheckedCheckpointManager(
      tf.train.Checkpoint(step=step), directory, max_to_keep=1,
      step_counter=step, checkpoint_interval=1)
  with pytest.raises(OSError, match=f"^{directory}: cannot save the "
                     "checkpoint of step 3"):
    manager.save()
