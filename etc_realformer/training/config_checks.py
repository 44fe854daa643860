"""Checks of the loop settings (`experiment.TrainerConfig`) where they enter.

Gin passes a bound value as written: `TrainerConfig.train_steps = 'abc'`
or `= -3` would otherwise fail deep inside the optimizer or the training
loop, after the model is built, with a traceback that names no setting.
`check_trainer_config` runs before the model is built and raises one
`UserInputError` naming the setting (`TrainerConfig.<field>`).
"""

from typing import Any

from etc_realformer import json_config
from etc_realformer.errors import UserInputError

# Settings that count something and must be at least 1.
POSITIVE_FIELDS = ("train_steps", "train_batch_size", "eval_batch_size",
                   "grad_accum_steps", "steps_per_loop",
                   "checkpoint_interval", "max_checkpoints_to_keep",
                   "eval_interval")
TRAIN_MODES = ("train", "train_and_eval")


def _fail(field: str, why: str) -> None:
  raise UserInputError(f"TrainerConfig.{field}: {why}")


def check_trainer_config(config: Any, mode: str = "train",
                         num_replicas: int = 1) -> None:
  """Checks a `TrainerConfig`'s types and ranges (and, for a training mode,
  that the batch divides into accumulation steps and replicas).

  Args:
    config: the `TrainerConfig`.
    mode: the run's mode (one of `experiment.MODES`).
    num_replicas: the strategy's replicas in sync.

  Raises:
    UserInputError: naming the setting(s), the value and what it must be.
  """
  json_config.check_field_types(config, "TrainerConfig")
  for field in POSITIVE_FIELDS:
    value = getattr(config, field)
    if value < 1:
      _fail(field, f"must be a positive integer, got {value!r}")
  if config.eval_steps != -1 and config.eval_steps < 1:
    _fail("eval_steps", f"must be positive, or -1 for the whole eval set; "
          f"got {config.eval_steps!r}")
  if mode in TRAIN_MODES:
    if config.summary_interval is not None and (
        config.summary_interval < 1 or
        config.summary_interval % config.steps_per_loop):
      # orbit's Controller writes summaries at the end of a loop only.
      _fail("summary_interval",
            f"{config.summary_interval} must be a positive multiple of "
            f"TrainerConfig.steps_per_loop ({config.steps_per_loop}), or "
            f"None")
    parts = config.grad_accum_steps * num_replicas
    if config.train_batch_size % parts:
      raise UserInputError(
          f"TrainerConfig.train_batch_size {config.train_batch_size} must be "
          f"divisible by TrainerConfig.grad_accum_steps "
          f"{config.grad_accum_steps} x {num_replicas} replica(s) = {parts}")
