"""Output folders checked before anything is written or built.

- `check_output_flag`: the runner's output folders (`--model_dir`, ...),
  local ones by `model_dir_lock.check_output_dir`: a `UserInputError`
  naming the flag;
- `check_output_dir`: a preprocess binary's output folder, any file system:
  an `OutputFileError` naming the regular file in the way.
"""

import errno
import os
from typing import Optional

import tensorflow as tf

from etc_realformer.training import model_dir_lock
from tasks.common import output_files


def check_output_dir(output_dir: str) -> None:
  """Fails early when `output_dir`, or a folder above it, is a regular file.

  Raises:
    OutputFileError: naming the regular file.
  """
  path = output_dir.rstrip("/") or "/"
  while path and not tf.io.gfile.exists(path):
    parent = os.path.dirname(path)
    if parent == path:
      return
    path = parent
  if path and not tf.io.gfile.isdir(path):
    raise output_files.OutputFileError(
        f"{output_dir}: cannot write output: {path} is a regular file, not "
        f"a folder ({os.strerror(errno.ENOTDIR)})")


def check_output_flag(flag: str, path: Optional[str]) -> None:
  """Raises UserInputError, naming the flag, when an output folder cannot
  be made because a regular file stands on its way (the folder itself or
  one above it): before the model is built, not at the first write."""
  if path:
    model_dir_lock.check_output_dir(path, f"--{flag}={path}")
