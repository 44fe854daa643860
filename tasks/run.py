"""The one runner of every task.

  python -m tasks.run --gin_file=tasks/wikihop.gin \
      --gin_file=models/etc_tiny.gin --gin_file=strategies/cpu.gin \
      --gin_bindings='TrainerConfig.train_steps = 1000' \
      --mode=train_and_eval --model_dir=/tmp/wikihop

Flags choose what to run; gin configures everything else (task, model size,
optimizer, strategy, precision, loop settings). `--mode=eval` reports the
task's loss and in-graph metrics, then predicts the eval input and scores it
with the task's official metric where gold is available. The operative gin
config is written to `model_dir/operative_config.gin` (train) or
`operative_config_<mode>.gin`. Running the same command again after a crash
resumes from the last checkpoint in `model_dir`.

Tasks are found, not listed: every package `tasks/<name>/` with a `task.py`
is imported, and its `@register_task` class becomes available to gin.
`python -m tasks.<name>` is the same runner with `gin/tasks/<name>.gin`
applied first (`entry`).
"""

import importlib
import logging as logging_lib
import os
import pkgutil
import sys
from typing import Sequence

from absl import flags
from absl import logging
import gin

from etc_realformer import cli
from etc_realformer.errors import UserInputError
from etc_realformer.training import experiment
from etc_realformer.training import task as task_lib

FLAGS = flags.FLAGS

flags.DEFINE_multi_string("gin_file", [], "Gin files, applied in order.")
flags.DEFINE_multi_string("gin_bindings", [],
                          "Gin bindings, applied after the files.")
flags.DEFINE_enum("mode", "train",
                  ["train", "eval", "train_and_eval", "predict", "export"],
                  "What to run.")
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries, configs.")
flags.DEFINE_string("export_dir", None,
                    "Export: SavedModel base dir (default model_dir/export).")
flags.DEFINE_string("checkpoint", None,
                    "eval/predict/export: checkpoint to use instead of the "
                    "latest in model_dir.")
flags.DEFINE_string("predictions_dir", None,
                    "predict: output dir (default model_dir/predictions); "
                    "eval: where the official scoring writes (default "
                    "model_dir/eval_predictions).")

TASKS_DIR = os.path.dirname(os.path.abspath(__file__))


def _gin_root() -> str:
  """The folder of the project's gin files: `tasks/gin` in an installed
  package (the wheel carries the repository's gin/ there), else the
  checkout's gin/ beside tasks/."""
  packaged = os.path.join(TASKS_DIR, "gin")
  if os.path.isdir(packaged):
    return packaged
  return os.path.join(os.path.dirname(TASKS_DIR), "gin")


# Gin files may be given relative to this folder (`tasks/wikihop.gin`,
# `models/etc_tiny.gin`, `strategies/cpu.gin`).
GIN_ROOT = _gin_root()


def register_tasks() -> None:
  """Imports every task package's `task` module (so that its gin
  configurables exist; the training spine's come with this module)."""
  for info in pkgutil.iter_modules([TASKS_DIR]):
    if info.ispkg and os.path.exists(
        os.path.join(TASKS_DIR, info.name, "task.py")):
      importlib.import_module(f"tasks.{info.name}.task")


class _QuietGinResourceLookup(logging_lib.Filter):
  """Drops gin's "Path not found" error for a relative gin file: gin first
  looks for it as a Python package resource (and logs an error when there is
  none) before it tries the search paths below, where ours are found."""

  def filter(self, record: logging_lib.LogRecord) -> bool:
    return not (record.module == "resource_reader" and
                record.getMessage().startswith("Path not found"))


def parse_gin(gin_files: Sequence[str], gin_bindings: Sequence[str]) -> None:
  """Parses gin files (relative to gin/ or the repository) and bindings.

  Raises:
    UserInputError: a file is missing or a binding does not parse.
  """
  gin.add_config_file_search_path(GIN_ROOT)
  gin.add_config_file_search_path(os.path.dirname(GIN_ROOT))
  root = logging_lib.getLogger()
  if not any(isinstance(f, _QuietGinResourceLookup) for f in root.filters):
    root.addFilter(_QuietGinResourceLookup())
  try:
    gin.parse_config_files_and_bindings(gin_files, gin_bindings,
                                        finalize_config=False)
  except (IOError, ValueError, NameError, SyntaxError) as e:
    line = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
    raise UserInputError(f"gin: {line}") from e


def run(mode: str, model_dir: str, **kwargs):
  """Builds the gin-configured task and runs one mode (library entry)."""
  task = task_lib.task_class()()
  return experiment.run_experiment(task, mode, model_dir, **kwargs)


def main(argv):
  if len(argv) > 1:
    raise UserInputError(f"unexpected arguments: {argv[1:]}")
  if not FLAGS.model_dir:
    raise UserInputError("--model_dir is required")
  register_tasks()
  parse_gin(FLAGS.gin_file, FLAGS.gin_bindings)
  logging.info("mode=%s model_dir=%s", FLAGS.mode, FLAGS.model_dir)
  run(FLAGS.mode, FLAGS.model_dir, export_dir=FLAGS.export_dir,
      checkpoint=FLAGS.checkpoint, predictions_dir=FLAGS.predictions_dir)


def entry(task_gin_file: str = "") -> None:
  """The console entry; `python -m tasks.<name>` passes its gin file, which
  is applied before the user's."""
  if task_gin_file:
    sys.argv[1:1] = [f"--gin_file={task_gin_file}"]
  cli.run(main)


if __name__ == "__main__":
  entry()
