"""The runner: task discovery, gin plumbing (every gin file parses, model
sizes, the released config as the base), flags, and one-line errors."""

import glob
import os
import subprocess
import sys

import gin
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import cli_testing
from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError
from etc_realformer.training import experiment
from etc_realformer.training import task as task_lib
from tasks import run
import wikihop_testing

GIN_DIR = run.GIN_ROOT
REPO = os.path.dirname(GIN_DIR)


@pytest.fixture(autouse=True)
def clean_gin():
  run.register_tasks()
  gin.clear_config()
  yield
  gin.clear_config()
  tf_keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("path", sorted(
    os.path.relpath(p, GIN_DIR)
    for p in glob.glob(os.path.join(GIN_DIR, "**", "*.gin"), recursive=True)))
def test_every_gin_file_parses(path):
  run.parse_gin([path], [])


@pytest.mark.parametrize("size,expected", [
    ("etc_base", dict(hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072)),
    ("etc_large", dict(hidden_size=1024, num_hidden_layers=24,
                       num_attention_heads=16, intermediate_size=4096)),
])
def test_model_sizes_turn_residual_attention_on(size, expected):
  run.parse_gin([f"models/{size}.gin"], ["etc_config.vocab_size = 100"])
  config = task_lib.etc_config()
  for field, value in expected.items():
    assert getattr(config, field) == value, field
  assert config.local_radius == 84
  assert config.relative_pos_max_distance == 12
  assert config.relative_vocab_size == 32
  assert config.residual_attention


def test_xla_gin_compiles_and_draws_dropout_from_the_hash():
  run.parse_gin(["precision/xla.gin"], [])
  assert task_lib.execution_config().dropout_rng == "hash"
  assert task_lib.execution_config(dropout_rng="philox").dropout_rng == (
      "philox")


def test_released_config_json_is_the_base(golden_dir):
  # A released etc_config.json under the project's switches: the JSON gives
  # the shapes, the bindings (RealFormer on) win.
  run.parse_gin([], [
      f"etc_config.config_file = '{golden_dir / 'etc_config.json'}'",
      "etc_config.residual_attention = True"])
  config = task_lib.etc_config()
  assert (config.hidden_size, config.num_hidden_layers) == (32, 2)
  assert config.residual_attention


def test_wikihop_task_and_trainer_from_gin(tmp_path):
  run.parse_gin(["tasks/wikihop.gin", "models/etc_tiny.gin"], [
      "etc_config.vocab_size = 100",
      "TrainerConfig.train_steps = 7",
      "TrainerConfig.grad_accum_steps = 2",
      "optimizer.optimizer_type = 'lamb'"])
  task = task_lib.task_class()()
  assert task.name == "wikihop"
  assert (task.long_seq_len, task.global_seq_len) == (4096, 430)
  assert task.model_config.hidden_size == 64
  assert task.model_config.use_hard_g2l_mask
  config = experiment.TrainerConfig()
  assert (config.train_steps, config.grad_accum_steps) == (7, 2)


def test_runner_flags_cover_all_modes():
  from absl import flags  # pylint: disable=g-import-not-at-top
  assert set(flags.FLAGS["mode"].parser.enum_values) == set(experiment.MODES)
  for name in ("gin_file", "gin_bindings", "model_dir", "export_dir",
               "checkpoint", "predictions_dir"):
    assert name in flags.FLAGS


def test_tasks_are_discovered():
  names = set(task_lib.registered_tasks())
  assert {"wikihop", "hotpotqa", "nq", "openkp"} <= names


def test_gin_errors_are_user_errors():
  with pytest.raises(UserInputError, match="gin"):
    run.parse_gin(["no_such_file.gin"], [])
  with pytest.raises(UserInputError, match="gin"):
    run.parse_gin([], ["NoSuchConfigurable.x = 1"])


@pytest.mark.parametrize("args,message", [
    (["--mode=eval"], "--model_dir"),
    (["--model_dir={tmp}/model", "--gin_file=missing_dir/nope.gin"], "gin"),
])
def test_binary_reports_user_mistakes_in_one_line(tmp_path, args, message):
  args = [a.format(tmp=tmp_path) for a in args]
  result = subprocess.run([sys.executable, "-m", "tasks.run", *args],
                          cwd=REPO, capture_output=True, text=True,
                          timeout=300)
  assert result.returncode == 2, result.stderr[-2000:]
  lines = [l for l in result.stderr.splitlines() if l.startswith("error:")]
  assert len(lines) == 1 and message in lines[0], result.stderr[-2000:]
  assert "Traceback" not in result.stderr


def test_help_lists_the_binarys_own_flags():
  import cli_testing  # pylint: disable=g-import-not-at-top
  proc = cli_testing.run_here("tasks.wikihop", ["--help"])
  for flag in ("--gin_file", "--gin_bindings", "--mode", "--model_dir"):
    assert flag in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize("files,bindings,where,what", [
    # Python's ast says "malformed node ... <ast.Name object at 0x...>":
    # the file, the line and the line's text say where.
    (["TrainerConfig.train_steps = 3", "TrainerConfig.eval_steps = foo bar"],
     [], "bad.gin, line 2", "TrainerConfig.eval_steps = foo bar"),
    ([], ["TrainerConfig.train_steps = 3", "TrainerConfig.eval_steps = x y"],
     "--gin_bindings line 2", "TrainerConfig.eval_steps = x y"),
    (["TrainerConfig.train_stepz = 3"], [], "bad.gin, line 1",
     "doesn't have a parameter named 'train_stepz'"),
    ([], ["TrainerConfig.train_stepz = 3"], "--gin_bindings line 1",
     "train_stepz"),
    (["TrainerConfig.train_steps = (3"], [], "bad.gin", "unbalanced"),
])
def test_gin_errors_name_the_file_and_line(tmp_path, files, bindings, where,
                                           what):
  gin_files = []
  if files:
    (tmp_path / "bad.gin").write_text("\n".join(files) + "\n")
    gin_files = [str(tmp_path / "bad.gin")]
  with pytest.raises(UserInputError) as raised:
    run.parse_gin(gin_files, bindings)
  message = str(raised.value)
  assert where in message and what in message, message
  assert "\n" not in message and "<ast." not in message, message


# A WikiHop run small enough to build its model in a second.
_TINY = ["--gin_file=models/etc_tiny.gin",
         "--gin_bindings=etc_config.vocab_size = 120",
         "--gin_bindings=WikiHopTask.long_seq_len = 64",
         "--gin_bindings=WikiHopTask.global_seq_len = 16"]


@pytest.mark.parametrize("module,args,texts", [
    # No model gin sets the vocabulary's size.
    ("tasks.wikihop", [], ["etc_config.vocab_size is not set"]),
    ("tasks.run", ["--gin_file=models/etc_tiny.gin"], ["no task chosen",
                                                       "@WikiHopTask"]),
    ("tasks.wikihop", ["--gin_bindings=TrainerConfig.train_stepz = 3"],
     ["gin: --gin_bindings line 1", "train_stepz"]),
    ("tasks.wikihop", ["--gin_bindings=TrainerConfig.train_steps = 'abc'",
                       "--gin_bindings=etc_config.vocab_size = 120"],
     ["gin: TrainerConfig.train_steps = 'abc': expected an integer"]),
    ("tasks.wikihop", ["--gin_bindings=TrainerConfig.train_steps = -3",
                       "--gin_bindings=etc_config.vocab_size = 120"],
     ["TrainerConfig.train_steps", "-3"]),
    ("tasks.wikihop", ["--gin_bindings=etc_config.hidden_size = 'wide'",
                       "--gin_bindings=etc_config.vocab_size = 120"],
     ["EtcConfig.hidden_size: expected an integer, got 'wide'"]),
    # A name the task's **kwargs take and no base class has (a typo of
    # train_input), and a value checked against the base's hint.
    ("tasks.wikihop", ["--gin_bindings=WikiHopTask.train_files = 'x'",
                       "--gin_bindings=etc_config.vocab_size = 120"],
     ["gin: WikiHopTask.train_files: WikiHopTask has no parameter "
      "'train_files'", "train_input"]),
    ("tasks.wikihop", ["--gin_bindings=WikiHopTask.train_input = 3",
                       "--gin_bindings=etc_config.vocab_size = 120"],
     ["gin: WikiHopTask.train_input = 3: expected a string"]),
    ("tasks.wikihop", ["--gin_bindings=WikiHopTask.long_seq_len = 'long'",
                       "--gin_bindings=etc_config.vocab_size = 120"],
     ["gin: WikiHopTask.long_seq_len = 'long': expected an integer"]),
    ("tasks.wikihop", ["--gin_bindings=optimizer.learning_rate = 'fast'",
                       "--gin_bindings=etc_config.vocab_size = 120"],
     ["gin: optimizer.learning_rate = 'fast': expected a number"]),
    ("tasks.wikihop", ["--gin_bindings=TrainerConfig.grad_accum_steps = 3",
                       "--gin_bindings=etc_config.vocab_size = 120"],
     ["TrainerConfig.train_batch_size 32", "TrainerConfig.grad_accum_steps 3"]),
    # The model is built, then the input is opened.
    ("tasks.wikihop", _TINY, ["WikiHopTask.train_input"]),
])
def test_configuration_mistakes_are_one_line(tmp_path, module, args, texts):
  cli_testing.user_error_line_here(
      module, ["--mode=train", f"--model_dir={tmp_path / 'model'}", *args],
      *texts)


def test_a_gin_file_with_a_bad_line_is_named_by_the_binary(tmp_path):
  bad = tmp_path / "mine.gin"
  bad.write_text("etc_config.vocab_size = 120\n"
                 "TrainerConfig.train_steps = ten\n")
  cli_testing.user_error_line_here(
      "tasks.wikihop", ["--mode=train", f"--model_dir={tmp_path / 'model'}",
                        f"--gin_file={bad}"],
      "mine.gin, line 2", "TrainerConfig.train_steps = ten")


@pytest.mark.parametrize("mode,flag", [
    ("train", "model_dir"), ("export", "export_dir"),
    ("predict", "predictions_dir"), ("eval", "predictions_dir")])
def test_an_output_folder_under_a_regular_file_is_one_line(tmp_path, mode,
                                                           flag):
  regular = tmp_path / "a_file"
  regular.write_text("not a folder")
  paths = {"model_dir": tmp_path / "model", flag: regular / "out"}
  cli_testing.user_error_line_here(
      "tasks.wikihop", [f"--mode={mode}", *_TINY,
                        *(f"--{k}={v}" for k, v in paths.items())],
      f"--{flag}={regular / 'out'}", f"under {regular}, a regular file")


def test_tfrecords_of_other_lengths_are_named_with_both_lengths(tmp_path):
  # One record as preprocessing at L = 32 tokens writes it, read at 64.
  spec = wikihop_testing.tiny_task().feature_spec()
  record = {name: np.zeros([n or 1 for n in shape],
                           np.str_ if dtype == tf.string else np.int64)
            for name, (dtype, shape) in spec.items()}
  path = str(tmp_path / "train.tfrecord")
  tfrecords.write_tfrecord(path, [tfrecords.to_tf_example(record, spec)])
  cli_testing.user_error_line_here(
      "tasks.wikihop", [
          "--mode=train", f"--model_dir={tmp_path / 'model'}", *_TINY,
          f"--gin_bindings=WikiHopTask.train_input = '{path}'"],
      f"train.tfrecord: record 0, feature 'token_ids' has "
      f"{wikihop_testing.L} values where the reader expects 64",
      "WikiHopTask.long_seq_len = 64")
