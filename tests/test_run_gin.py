"""Gin plumbing of the runner: every gin file parses, model sizes, switches."""

import glob
import os

import gin
import pytest
import tensorflow as tf
import tf_keras

from etc_realformer.training import distribution
from etc_realformer.training import experiment
from tasks import base
from tasks import run

GIN_DIR = run.GIN_ROOT


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
  config = base.etc_config()
  for field, value in expected.items():
    assert getattr(config, field) == value, field
  assert config.local_radius == 84
  assert config.relative_pos_max_distance == 12
  assert config.relative_vocab_size == 32
  assert config.residual_attention


def test_released_config_json_is_the_base(golden_dir):
  # A released etc_config.json under the project's switches: the JSON gives
  # the shapes, the bindings (RealFormer on) win.
  run.parse_gin([], [
      f"etc_config.config_file = '{golden_dir / 'etc_config.json'}'",
      "etc_config.residual_attention = True"])
  config = base.etc_config()
  assert (config.hidden_size, config.num_hidden_layers) == (32, 2)
  assert config.residual_attention


def test_wikihop_task_and_trainer_from_gin(tmp_path):
  run.parse_gin(["tasks/wikihop.gin", "models/etc_tiny.gin"], [
      "etc_config.vocab_size = 100",
      "TrainerConfig.train_steps = 7",
      "TrainerConfig.grad_accum_steps = 2",
      "optimizer.optimizer_type = 'lamb'"])
  task = run.task_class()()
  assert task.name == "wikihop"
  assert (task.long_seq_len, task.global_seq_len) == (4096, 430)
  assert task.model_config.hidden_size == 64
  assert task.model_config.use_hard_g2l_mask
  config = experiment.TrainerConfig()
  assert (config.train_steps, config.grad_accum_steps) == (7, 2)


def test_strategy_selection():
  assert distribution.build_strategy("off") is tf.distribute.get_strategy()
  one = distribution.build_strategy("one_device")
  assert isinstance(one, tf.distribute.OneDeviceStrategy)
  with pytest.raises(ValueError, match="distribution_strategy"):
    distribution.build_strategy("parameter_server")
  run.parse_gin(["strategies/one_gpu.gin"], [])
  assert gin.query_parameter("strategy.num_gpus") == 1


@pytest.mark.parametrize("name,policy", [
    (None, "float32"), ("bfloat16", "mixed_bfloat16"),
    ("float16", "mixed_float16")])
def test_precision_switch(name, policy):
  distribution.set_precision(name)
  assert tf_keras.mixed_precision.global_policy().name == policy
  with pytest.raises(ValueError, match="mixed_precision"):
    distribution.set_precision("int8")


def test_runner_flags_cover_all_modes():
  from absl import flags  # pylint: disable=g-import-not-at-top
  assert set(flags.FLAGS["mode"].parser.enum_values) == set(experiment.MODES)
  for name in ("gin_file", "gin_bindings", "model_dir", "export_dir",
               "checkpoint", "predictions_dir"):
    assert name in flags.FLAGS
