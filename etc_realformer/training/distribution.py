"""Distribution strategy and numeric precision switches (gin-configurable).

Strategy creation is delegated to Model Garden's
`official.common.distribute_utils.get_distribution_strategy` (cpu/'off',
one_device, mirrored, multi_worker_mirrored from TF_CONFIG, tpu); this module
only adds the logical-CPU split used to test mirrored training on one CPU.
"""

from typing import Optional

from absl import logging
import gin
import tensorflow as tf
import tf_keras
from official.common import distribute_utils

STRATEGIES = ("off", "one_device", "mirrored", "multi_worker_mirrored",
              "tpu")


def split_cpu(num_logical_cpus: int) -> None:
  """Splits the first CPU into `num_logical_cpus` logical devices.

  Must run before TensorFlow initialises its devices (before any op runs).
  """
  cpus = tf.config.list_physical_devices("CPU")
  tf.config.set_logical_device_configuration(
      cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_logical_cpus)


@gin.configurable("strategy")
def build_strategy(distribution_strategy: str = "off",
                   num_gpus: int = 0,
                   tpu_address: Optional[str] = None,
                   num_logical_cpus: int = 0,
                   all_reduce_alg: Optional[str] = None
                   ) -> tf.distribute.Strategy:
  """Returns the tf.distribute strategy selected by the gin config.

  Args:
    distribution_strategy: one of STRATEGIES. 'off' = the default strategy
      (one CPU or GPU); 'multi_worker_mirrored' reads the cluster from the
      TF_CONFIG environment variable; 'tpu' connects to `tpu_address`
      ('' or 'local' for a TPU VM).
    num_gpus: GPUs per worker for 'one_device'/'mirrored' (0 = CPU).
    tpu_address: see above.
    num_logical_cpus: when > 1 and no GPU is used, mirror over that many
      logical CPU devices (for tests and debugging of the mirrored path).
    all_reduce_alg: passed to Model Garden ('nccl', 'ring', ...).
  """
  if distribution_strategy not in STRATEGIES:
    raise ValueError(f"distribution_strategy {distribution_strategy!r} is "
                     f"not one of {STRATEGIES}")
  if num_logical_cpus > 1 and distribution_strategy == "mirrored":
    split_cpu(num_logical_cpus)
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    logging.info("Mirrored over logical CPUs %s", devices)
    return tf.distribute.MirroredStrategy(devices)
  return distribute_utils.get_distribution_strategy(
      distribution_strategy=distribution_strategy, num_gpus=num_gpus,
      tpu_address=tpu_address, all_reduce_alg=all_reduce_alg)


MIXED_PRECISION = (None, "float32", "bfloat16", "float16")


@gin.configurable("precision")
def set_precision(mixed_precision: Optional[str] = None) -> Optional[str]:
  """Sets the global tf_keras dtype policy before the model is built.

  Args:
    mixed_precision: None/'float32' (plain float32), 'bfloat16' (TPU, recent
      GPUs) or 'float16' (GPUs; the trainer then wraps the optimizer in a
      dynamic LossScaleOptimizer).

  Returns:
    The compute dtype name for reduced precision, else None.
  """
  if mixed_precision not in MIXED_PRECISION:
    raise ValueError(f"mixed_precision {mixed_precision!r} is not one of "
                     f"{MIXED_PRECISION}")
  if mixed_precision in (None, "float32"):
    tf_keras.mixed_precision.set_global_policy("float32")
    return None
  tf_keras.mixed_precision.set_global_policy(f"mixed_{mixed_precision}")
  return mixed_precision
