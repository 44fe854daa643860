"""Finding a checkpoint's prefix from what a user gives."""

import os
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from etc_realformer.errors import UserInputError


def resolve_checkpoint_path(path: str) -> str:
  """A checkpoint prefix from a prefix, a directory, or an index/data file.

  A directory may hold a `checkpoint` state file (TF2 / tf.train.Saver; its
  latest checkpoint is taken) or, as the released ETC and BERT downloads do,
  just one `model.ckpt.*` set.

  Raises:
    FileNotFoundError: nothing there; ValueError: a directory holds several
      checkpoints and no state file.
  """
  if tf.io.gfile.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest:
      return latest
    candidates = sorted(f[:-len(".index")] for f in tf.io.gfile.listdir(path)
                        if f.endswith(".index"))
    if len(candidates) == 1:
      return os.path.join(path, candidates[0])
    if not candidates:
      raise FileNotFoundError(f"no checkpoint (*.index) in directory {path}")
    raise UserInputError(f"several checkpoints in {path}: {candidates}; "
                         "pass one "
                     "prefix")
  for suffix in (".index", ".data-00000-of-00001"):
    if path.endswith(suffix):
      path = path[:-len(suffix)]
  if not tf.io.gfile.exists(path + ".index"):
    raise FileNotFoundError(f"checkpoint not found: {path} (no {path}.index)")
  return path


# What reading a damaged checkpoint raises: an OpError (DataLossError for a
# corrupt block, NotFoundError for a missing shard, ...), or IndexError from
# TF's restore when a data file is shorter than its index says (truncated).
UNREADABLE = (tf.errors.OpError, IndexError)


def unreadable_detail(error: BaseException) -> str:
  """The first line of what TF said about an unreadable checkpoint."""
  text = getattr(error, "message", None) or str(error)
  lines = text.strip().splitlines()
  return lines[0] if lines else type(error).__name__


def list_checkpoint_variables(prefix: str) -> List[Tuple[str, List[int]]]:
  """`tf.train.list_variables(prefix)`, or UserInputError naming the path
  when its index is not a checkpoint's (a file of something else, a
  truncated or damaged index)."""
  try:
    return tf.train.list_variables(prefix)
  except (*UNREADABLE, ValueError) as e:
    raise UserInputError(f"{prefix}: not a readable checkpoint "
                         f"({unreadable_detail(e)})") from e


def read_checkpoint_tensors(prefix: str,
                            names: Optional[Iterable[str]] = None
                            ) -> Dict[str, np.ndarray]:
  """The values of `names` (default: all) of a name-based checkpoint, every
  one read before any is used, so that a loader that assigns them after
  this leaves its model untouched when the file is damaged.

  Raises:
    UserInputError: naming the path, when it cannot be read.
  """
  try:
    reader = tf.train.load_checkpoint(prefix)
    if names is None:
      names = reader.get_variable_to_shape_map()
    return {name: reader.get_tensor(name) for name in names}
  except UNREADABLE as e:
    raise UserInputError(f"{prefix}: the checkpoint cannot be read "
                         f"({unreadable_detail(e)})") from e
