"""Finding a checkpoint's prefix from what a user gives."""

import os

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
