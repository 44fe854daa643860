"""Optimizers and learning-rate schedules, built with Model Garden.

`official.modeling.optimization.OptimizerFactory` already provides AdamW
(`legacy_adamw.AdamWeightDecay`), LAMB, the
polynomial (power 1 = linear) decay and the linear warmup, so this module only
fills the ETC fine-tuning defaults into an `OptimizationConfig`.
"""

from typing import List, Optional

import gin
import tensorflow as tf
import tf_keras
from official.modeling.optimization import optimizer_factory
from official.modeling.optimization.configs import optimization_config

# Variables whose names match one of these regexes get no weight decay (and,
# for LAMB, no layer adaptation): LayerNorm scales/offsets and all biases,
# as in BERT/ETC fine-tuning. Keras names LayerNormalization's variables
# `.../gamma` and `.../beta` (the layer's own name may not be in the variable
# name), hence the last two.
NO_DECAY_PATTERNS: List[str] = ["LayerNorm", "layer_norm", "bias",
                                r"(^|/)gamma(:\d+)?$",
                                r"(^|/)beta(:\d+)?$"]

OPTIMIZER_TYPES = ("adamw", "lamb")


@gin.configurable("optimizer")
def build_optimizer(
    train_steps: int,
    optimizer_type: str = "adamw",
    learning_rate: float = 5e-5,
    end_learning_rate: float = 0.0,
    warmup_steps: Optional[int] = None,
    warmup_fraction: float = 0.1,
    weight_decay_rate: float = 0.01,
    clip_norm: float = 1.0,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-6,
) -> tf_keras.optimizers.legacy.Optimizer:
  """AdamW or LAMB with linear warmup then linear decay to `end_learning_rate`.

  Args:
    train_steps: total optimizer steps (decay reaches its end there).
    optimizer_type: 'adamw' or 'lamb'.
    learning_rate: peak learning rate (reached at the end of warmup).
    end_learning_rate: learning rate at `train_steps`.
    warmup_steps: linear warmup length; when None, `warmup_fraction` of
      `train_steps`.
    warmup_fraction: see `warmup_steps`.
    weight_decay_rate: decoupled weight decay (not applied to LayerNorm
      parameters and biases).
    clip_norm: gradients are clipped to this global norm (0 disables).
    beta_1, beta_2, epsilon: Adam moments.

  Returns:
    A Keras (legacy) optimizer whose `iterations` is the global step.
  """
  if optimizer_type not in OPTIMIZER_TYPES:
    raise ValueError(f"optimizer_type {optimizer_type!r} is not one of "
                     f"{OPTIMIZER_TYPES}")
  if train_steps < 1:
    raise ValueError(f"train_steps must be positive, got {train_steps}")
  if warmup_steps is None:
    warmup_steps = int(train_steps * warmup_fraction)
  common = dict(beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                weight_decay_rate=weight_decay_rate,
                exclude_from_weight_decay=NO_DECAY_PATTERNS)
  # Clipping with Keras' `global_clipnorm`, which runs after the
  # cross-replica gradient aggregation, so N replicas clip the same gradient
  # as one device would. (AdamWeightDecay's own `gradient_clip_norm` clips
  # each replica's partial gradient before aggregation: off.)
  clip = {"global_clipnorm": clip_norm if clip_norm > 0 else None}
  if optimizer_type == "adamw":
    opt = {"type": "adamw",
           "adamw": dict(common, gradient_clip_norm=0.0, **clip)}
  else:
    opt = {"type": "lamb",
           "lamb": dict(common,
                        exclude_from_layer_adaptation=NO_DECAY_PATTERNS,
                        **clip)}
  params = {
      "optimizer": opt,
      "learning_rate": {
          "type": "polynomial",
          "polynomial": {
              "initial_learning_rate": learning_rate,
              # The polynomial schedule counts from step 0, so the decay
              # spans the whole run and warmup overrides its first steps,
              # exactly like BERT's/ETC's `optimization.create_optimizer`.
              "decay_steps": train_steps,
              "end_learning_rate": end_learning_rate,
              "power": 1.0,
          },
      },
  }
  if warmup_steps > 0:
    params["warmup"] = {"type": "linear",
                        "linear": {"warmup_steps": warmup_steps,
                                   "warmup_learning_rate": 0.0}}
  config = optimization_config.OptimizationConfig(params)
  factory = optimizer_factory.OptimizerFactory(config)
  return factory.build_optimizer(factory.build_learning_rate())


def current_learning_rate(optimizer) -> tf.Tensor:
  """The learning rate the optimizer uses at its current step (float32)."""
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  lr = inner.learning_rate
  if isinstance(lr, tf_keras.optimizers.schedules.LearningRateSchedule):
    lr = lr(inner.iterations)
  return tf.cast(lr, tf.float32)
