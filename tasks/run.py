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
import inspect
import logging as logging_lib
import os
import pkgutil
import re
import sys
import tokenize
import typing
from typing import Any, Optional, Sequence

from absl import flags
from absl import logging
import gin

from etc_realformer import cli
from etc_realformer import json_config
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
          f"gin: {gin_error_text(e, gin_bindings, source)}") from e
  check_gin_value_types()


def _holds_gin_reference(value: Any) -> bool:
  """Whether a bound value is (or holds) a gin reference or macro, whose
  value is known only when it is called."""
  if type(value).__module__.split(".")[0] == "gin":
    return True
  if isinstance(value, (list, tuple)):
    return any(_holds_gin_reference(v) for v in value)
  if isinstance(value, dict):
    return any(_holds_gin_reference(v) for v in value.values())
  return False


def check_gin_value_types() -> None:
  """Checks every bound value against its parameter's type hint.

  Gin passes a value as written: `TrainerConfig.train_steps = 'abc'` or
  `optimizer.learning_rate = 'fast'` would otherwise fail far from its
  binding. Parameters without a hint, `**kwargs` (`etc_config`'s fields,
  checked by `EtcConfig`) and references (`@name`, `%MACRO`) are left to
  the code that reads them.

  Raises:
    UserInputError: "gin: <Configurable>.<parameter> = <value>: expected
      <type>".
  """
  # Gin has no public listing of its bindings; without these the check is
  # skipped (the code that reads the values still checks the ones it can).
  bindings = getattr(gin.config, "_CONFIG", None)
  registry = getattr(gin.config, "_REGISTRY", None)
  if bindings is None or registry is None:
    return
  for (scope, selector), params in list(bindings.items()):
    configurable = registry.get_match(selector)
    if configurable is None:
      continue
    target = configurable.wrapped
    if inspect.isclass(target):
      target = target.__init__
    try:
      hints = typing.get_type_hints(target)
      defaults = {k: p.default for k, p in
                  inspect.signature(target).parameters.items()}
    except Exception:  # pylint: disable=broad-except
      continue  # Hints that do not resolve: nothing to check against.
    for name, value in params.items():
      if name not in hints or _holds_gin_reference(value):
        continue
      if value is None and defaults.get(name, inspect.Parameter.empty) is None:
        continue  # `x: str = None`: None is the parameter's own default.
      if not json_config.value_matches(value, hints[name]):
        where = f"{scope}/" if scope else ""
        raise UserInputError(
            f"gin: {where}{configurable.name}.{name} = {value!r}: expected "
            f"{json_config.describe_type(hints[name])}")


_search_paths_added = False


# Where gin says a bad binding is: `In file "<path>", line N` or
# `In bindings string line N`, on a line of its own after the message.
_GIN_LOCATION = re.compile(
    r'^\s*In (?:file "(?P<file>[^"]*)", line (?P<line>\d+)|'
    r"bindings string line (?P<binding_line>\d+))\s*$")
# The location a gin syntax error puts at the end of its message:
# "(<file name>, line N)" or "(line N)".
_GIN_SYNTAX_LOCATION = re.compile(r"\s*\((?:[^()]*, )?line \d+\)\s*$")


def gin_error_text(error: BaseException, gin_bindings: Sequence[str] = (),
                   source: Optional[str] = None) -> str:
  """One line of a gin parse error: "<file>, line N: <what>: <the line>".

  Gin's message puts the location on a line of its own (a bad value or an
  unknown name) or, for a syntax error, into the exception's `filename`
  and `lineno`, after a first line from Python's `ast` that names neither
  ("malformed node or string ... <ast.Name object at 0x...>"). Bindings
  are parsed as one string, one binding per line: line N is the Nth
  binding. `source`: the file (or `--gin_bindings`) being parsed, named
  when gin's message names no place (an unbalanced bracket's
  `tokenize.TokenError`, a file that is not found).
  """
  if isinstance(error, tokenize.TokenError):
    what, (lineno, _) = error.args
    return f"{source or 'gin'}: {what} (unbalanced bracket or quote?) " \
           f"ending at line {lineno}"
  text = str(error).strip() or type(error).__name__
  lines = [line.rstrip() for line in text.splitlines() if line.strip()]
  where, source_line = None, None
  if isinstance(error, SyntaxError) and error.lineno is not None:
    where = (f"{error.filename}, line {error.lineno}" if error.filename
             else f"--gin_bindings line {error.lineno}")
    what = [line.strip() for line in lines if "<ast." not in line]
    what = [_GIN_SYNTAX_LOCATION.sub("", line) for line in what]
    if error.text and error.text.strip():
      source_line = error.text.strip()
    elif not error.filename:
      source_line = _binding_line(gin_bindings, error.lineno)
  else:
    what = []
    for i, line in enumerate(lines):
      match = _GIN_LOCATION.match(line)
      if match is None:
        if where is None:
          what.append(line.strip())
        continue
      if match["file"] is not None:
        where = f"{match['file']}, line {match['line']}"
      else:
        where = f"--gin_bindings line {match['binding_line']}"
      # Gin quotes the offending line next (and a caret under it).
      if i + 1 < len(lines):
        source_line = lines[i + 1].strip()
      break
  message = "; ".join(w.rstrip(".") for w in what if w) or type(error).__name__
  if source_line:
    message += f": {source_line}"
  if where is None and source and source not in message:
    where = source
  return f"{where}: {message}" if where else message


def _binding_line(gin_bindings: Sequence[str], lineno: int) -> Optional[str]:
  """Line `lineno` (1-based) of the bindings as gin joins them."""
  lines = "\n".join(gin_bindings).splitlines()
  return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else None


def run(mode: str, model_dir: str, **kwargs):
  """Builds the gin-configured task and runs one mode (library entry)."""
  task = task_lib.task_class()()
  return experiment.run_experiment(task, mode, model_dir, **kwargs)


def check_output_dir(flag: str, path: Optional[str]) -> None:
  """Raises UserInputError, naming the flag, when an output folder cannot
  be made because a regular file stands on its way (the folder itself or
  one above it): before the model is built, not at the first write.
  Other file systems (gs://) are left to their writes."""
  if not path or "://" in path:
    return
  here = os.path.abspath(path)
  while True:
    if os.path.exists(here):
      if not os.path.isdir(here):
        where = ("is a regular file" if here == os.path.abspath(path) else
                 f"is under {here}, a regular file")
        raise UserInputError(f"--{flag}={path}: {where}, not a folder")
      return
    parent = os.path.dirname(here)
    if parent == here:
      return
    here = parent


def main(argv):
  if len(argv) > 1:
    raise UserInputError(f"unexpected arguments: {argv[1:]}")
  if not FLAGS.model_dir:
    raise UserInputError("--model_dir is required")
  for flag in ("model_dir", "export_dir", "predictions_dir"):
    check_output_dir(flag, FLAGS[flag].value)
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
