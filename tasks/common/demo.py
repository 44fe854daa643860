"""Steps shared by the synthetic-data demos (`tasks/*/demo.py`).

Each demo writes synthetic files in its task's released format, featurizes
them, trains a tiny model with the shared runner from a gin config it writes
next to its outputs, exports and answers one record through the SavedModel.
What differs per task (the data, the gin text, the metric and the served
call) stays in the demo; the directory layout, the flags, the featurizing
loop and the gin setup are here once.
"""

import dataclasses
import os
import time
from typing import Callable, Dict, List, Mapping, Optional

from absl import flags


@dataclasses.dataclass(frozen=True)
class DemoFlags:
  """The flag holders every demo defines."""
  output_dir: flags.FlagHolder
  num_train: flags.FlagHolder
  num_dev: flags.FlagHolder
  seed: flags.FlagHolder
  train_steps: flags.FlagHolder


def define_flags(output_dir: str, train_steps: int,
                 num_train: int = 2000) -> DemoFlags:
  """--output_dir, --num_train, --num_dev, --seed, --train_steps."""
  return DemoFlags(
      output_dir=flags.DEFINE_string("output_dir", output_dir,
                                     "Where data, model and export go."),
      num_train=flags.DEFINE_integer("num_train", num_train,
                                     "Synthetic train size."),
      num_dev=flags.DEFINE_integer("num_dev", 300, "Synthetic dev size."),
      seed=flags.DEFINE_integer("seed", 0, "Data and shuffle seed."),
      train_steps=flags.DEFINE_integer("train_steps", train_steps,
                                       "Optimizer steps."))


@dataclasses.dataclass(frozen=True)
class DemoDirs:
  """OUTPUT_DIR/{data,model,export} and the gin file the demo writes."""
  output: str
  data: str
  model: str
  export: str
  gin: str

  @classmethod
  def under(cls, output_dir: str) -> "DemoDirs":
    root = os.path.abspath(output_dir)
    return cls(output=root, data=os.path.join(root, "data"),
               model=os.path.join(root, "model"),
               export=os.path.join(root, "export"),
               gin=os.path.join(root, "demo.gin"))


def featurize_splits(split_files: Mapping[str, str], data_dir: str,
                     featurizer, preprocess_file: Callable) -> None:
  """Caches each split's TFRecords and prints one line of stats per split.

  Args:
    split_files: split name -> released-format file.
    data_dir: where the TFRecords and stats go.
    featurizer: the task's featurizer.
    preprocess_file: the task's `preprocess.preprocess_file(path, output_dir,
      featurizer)` returning `RecordStats`.
  """
  for split, path in split_files.items():
    stats = preprocess_file(path, data_dir, featurizer)
    print(f"demo | {split}: {stats.examples_written} examples "
          f"({stats.examples_truncated} truncated, {stats.num_skipped} "
          "skipped)", flush=True)


def configure_gin(dirs: DemoDirs, gin_text: str,
                  gin_files: Optional[List[str]] = None,
                  gin_bindings: Optional[List[str]] = None) -> None:
  """Writes the demo's gin config, then parses it (user files/bindings win).

  The task modules' configurables must be registered first
  (`tasks.run.register_tasks`).
  """
  import gin  # pylint: disable=g-import-not-at-top
  from tasks import run  # pylint: disable=g-import-not-at-top
  with open(dirs.gin, "w") as f:
    f.write(gin_text)
  gin.clear_config()
  run.parse_gin([dirs.gin, *(gin_files or [])], gin_bindings or [])


def trainer_gin(train_steps: int) -> str:
  """The demos' optimizer and trainer settings (tiny model, CPU): gin text."""
  return f"""\
optimizer.learning_rate = 2e-3
optimizer.warmup_fraction = 0.05
optimizer.weight_decay_rate = 0.01
TrainerConfig.train_batch_size = 16
TrainerConfig.eval_batch_size = 64
TrainerConfig.train_steps = {train_steps}
TrainerConfig.steps_per_loop = 100
TrainerConfig.checkpoint_interval = 500
TrainerConfig.eval_interval = {train_steps}
"""


class Stopwatch:
  """Wall time of the demo's phases, for its summary."""

  def __init__(self):
    self._start = time.time()
    self._last = self._start
    self.seconds: Dict[str, float] = {}

  def lap(self, name: str) -> None:
    now = time.time()
    self.seconds[name] = round(now - self._last, 1)
    self._last = now

  def summary(self) -> Dict[str, float]:
    return {**self.seconds, "total": round(time.time() - self._start, 1)}
