"""The loop settings' checks: types from the field hints, ranges, and the
batch's divisibility, each naming the setting."""

import pytest

from etc_realformer.errors import UserInputError
from etc_realformer.training import config_checks
from etc_realformer.training import experiment


@pytest.mark.parametrize("settings,mode,replicas,message", [
    (dict(train_steps="abc"), "eval", 1,
     "TrainerConfig.train_steps: expected an integer, got 'abc'"),
    (dict(jit_compile=1), "train", 1,
     "TrainerConfig.jit_compile: expected a boolean"),
    (dict(train_steps=True), "train", 1, "TrainerConfig.train_steps"),
    (dict(init_checkpoint=3), "train", 1,
     "TrainerConfig.init_checkpoint: expected a string or null"),
    (dict(train_steps=-3), "train", 1,
     "TrainerConfig.train_steps: must be a positive integer, got -3"),
    (dict(eval_batch_size=0), "eval", 1, "TrainerConfig.eval_batch_size"),
    (dict(eval_steps=0), "eval", 1, "TrainerConfig.eval_steps"),
    (dict(summary_interval=15, steps_per_loop=10), "train", 1,
     r"TrainerConfig.summary_interval: 15 must be a positive multiple of "
     r"TrainerConfig.steps_per_loop \(10\)"),
    (dict(train_batch_size=8, grad_accum_steps=3), "train", 1,
     "TrainerConfig.train_batch_size 8 must be divisible by "
     "TrainerConfig.grad_accum_steps 3"),
    (dict(train_batch_size=8, grad_accum_steps=2), "train_and_eval", 8,
     r"2 x 8 replica\(s\) = 16"),
])
def test_bad_settings_are_named(settings, mode, replicas, message):
  with pytest.raises(UserInputError, match=message):
    config_checks.check_trainer_config(experiment.TrainerConfig(**settings),
                                       mode, replicas)


def test_good_settings_pass_and_eval_ignores_training_only_ones():
  config_checks.check_trainer_config(experiment.TrainerConfig(), "train", 1)
  config_checks.check_trainer_config(
      experiment.TrainerConfig(summary_interval=200, steps_per_loop=100,
                               init_checkpoint="/ckpt", eval_steps=-1),
      "train_and_eval", 4)
  # Divisibility and summaries concern training only.
  config_checks.check_trainer_config(
      experiment.TrainerConfig(train_batch_size=8, grad_accum_steps=3,
                               summary_interval=5), "eval", 1)
