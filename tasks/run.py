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
import tokenize
from typing import Sequence

from absl import flags
from absl import logging
import gin

from etc_realformer import cli
from etc_realformer.errors import UserInputError
from etc_realformer.training import experiment
from etc_realformer.training import task as task_lib
from tasks.common.command_line import gin_errors
from tasks.common.command_line import output_dirs

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
    UserInputError: a file is missing or a file or binding does not parse
      (or names a configurable or parameter that does not exist); the
      message names the file (or `--gin_bindings`) and line.
  """
  global _search_paths_added
  if not _search_paths_added:  # Once: gin lists them all in its errors.
    gin.add_config_file_search_path(GIN_ROOT)
    gin.add_config_file_search_path(os.path.dirname(GIN_ROOT))
    _search_paths_added = True
  root = logging_lib.getLogger()
  if not any(isinstance(f, _QuietGinResourceLookup) for f in root.filters):
    root.addFilter(_QuietGinResourceLookup())
  # As `gin.parse_config_files_and_bindings`, one source at a time: an
  # error that does not say where it is (an unbalanced bracket) is then
  # named by its source.
  sources = [(path, lambda p=path: gin.parse_config_file(p))
             for path in gin_files]
  if gin_bindings:
    sources.append(("--gin_bindings",
                    lambda: gin.parse_config(list(gin_bindings))))
  for source, parse in sources:
    try:
      parse()
    except (IOError, ValueError, NameError, SyntaxError,
            tokenize.TokenError) as e:
      raise UserInputError(
          f"gin: {gin_errors.gin_error_text(e, gin_bindings, source)}") from e
  gin_errors.check_gin_bindings()


_search_paths_added = False


def run(mode: str, model_dir: str, **kwargs):
  """Builds the gin-configured task and runs one mode (library entry)."""
  task = task_lib.task_class()()
  return experiment.run_experiment(task, mode, model_dir, **kwargs)


def main(argv):
  if len(argv) > 1:
    raise UserInputError(f"unexpected arguments: {argv[1:]}")
  if not FLAGS.model_dir:
    raise UserInputError("--model_dir is required")
  for flag in ("model_dir", "export_dir", "predictions_dir"):
    output_dirs.check_output_flag(flag, FLAGS[flag].value)
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
