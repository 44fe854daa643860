"""Initialising an encoder from a checkpoint of any supported kind.

Three kinds are recognised by their variable names:

* a released ETC checkpoint (TF1, name-based, `etc_document_bert/...`): loaded
  with `etc_realformer.load_official_checkpoint`;
* a TF2 object-based checkpoint of this project's task models (`model/encoder/
  ...`, written by the trainer's CheckpointManager): only the encoder is read;
* a TF2 object-based checkpoint of a bare encoder (`encoder/...`, e.g. written
  by the checkpoint converter as `tf.train.Checkpoint(encoder=encoder)`).
"""

import enum
import os
from typing import List

from absl import logging
import tensorflow as tf

OFFICIAL_ROOT = "etc_document_bert/"
_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


class CheckpointKind(enum.Enum):
  OFFICIAL_TF1 = "official_tf1"
  TF2_TASK_MODEL = "tf2_task_model"
  TF2_ENCODER = "tf2_encoder"


def resolve_checkpoint_path(path: str) -> str:
  """A checkpoint prefix from a prefix or a directory.

  A directory may hold a `checkpoint` state file (TF2 / tf.train.Saver) or, as
  the released ETC downloads do, just `model.ckpt.*` files.
  """
  if not tf.io.gfile.isdir(path):
    if not tf.io.gfile.exists(path + ".index"):
      raise FileNotFoundError(f"no checkpoint at {path} ({path}.index "
                              "missing)")
    return path
  latest = tf.train.latest_checkpoint(path)
  if latest:
    return latest
  indexes = sorted(tf.io.gfile.glob(os.path.join(path, "*.index")))
  if len(indexes) == 1:
    return indexes[0][:-len(".index")]
  if not indexes:
    raise FileNotFoundError(f"no checkpoint (*.index) in directory {path}")
  raise ValueError(f"several checkpoints in {path} and no `checkpoint` file; "
                   f"pass one prefix: {[i[:-6] for i in indexes]}")


def checkpoint_kind(prefix: str) -> CheckpointKind:
  names: List[str] = [n for n, _ in tf.train.list_variables(prefix)]
  if any(n.startswith(OFFICIAL_ROOT) for n in names):
    return CheckpointKind.OFFICIAL_TF1
  if _OBJECT_GRAPH in names:
    if any(n.startswith("model/encoder/") for n in names):
      return CheckpointKind.TF2_TASK_MODEL
    if any(n.startswith("encoder/") for n in names):
      return CheckpointKind.TF2_ENCODER
  raise ValueError(
      f"{prefix}: not a recognised checkpoint: expected variables under "
      f"'{OFFICIAL_ROOT}' (released ETC), 'model/encoder/' or 'encoder/' "
      f"(TF2); first names: {names[:5]}")


def initialize_encoder(encoder: tf.Module, path: str) -> CheckpointKind:
  """Loads encoder weights from `path` (a directory or a prefix).

  The encoder must already be built (variables created). Optimizer slots,
  `global_step` and head variables in the checkpoint are ignored.
  """
  prefix = resolve_checkpoint_path(path)
  kind = checkpoint_kind(prefix)
  logging.info("Initialising the encoder from %s (%s)", prefix, kind.value)
  if kind == CheckpointKind.OFFICIAL_TF1:
    from etc_realformer import load_official_checkpoint  # pylint: disable=g-import-not-at-top
    load_official_checkpoint(encoder, prefix)
    return kind
  if kind == CheckpointKind.TF2_TASK_MODEL:
    ckpt = tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=encoder))
  else:
    ckpt = tf.train.Checkpoint(encoder=encoder)
  status = ckpt.restore(prefix)
  # Every encoder variable must come from the checkpoint; anything else in it
  # (head, optimizer) is fine to skip.
  status.expect_partial().assert_existing_objects_matched()
  return kind
