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
from typing import List

from absl import logging
import tensorflow as tf

from etc_realformer.checkpoints.official import load_official_checkpoint
from etc_realformer.checkpoints.paths import resolve_checkpoint_path
from etc_realformer.errors import UserInputError

OFFICIAL_ROOT = "etc_document_bert/"
_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


class CheckpointKind(enum.Enum):
  OFFICIAL_TF1 = "official_tf1"
  TF2_TASK_MODEL = "tf2_task_model"
  TF2_ENCODER = "tf2_encoder"


def checkpoint_kind(prefix: str) -> CheckpointKind:
  names: List[str] = [n for n, _ in tf.train.list_variables(prefix)]
  if any(n.startswith(OFFICIAL_ROOT) for n in names):
    return CheckpointKind.OFFICIAL_TF1
  if _OBJECT_GRAPH in names:
    if any(n.startswith("model/encoder/") for n in names):
      return CheckpointKind.TF2_TASK_MODEL
    if any(n.startswith("encoder/") for n in names):
      return CheckpointKind.TF2_ENCODER
  raise UserInputError(
      f"{prefix}: not a recognised checkpoint: expected variables under "
      f"'{OFFICIAL_ROOT}' (released ETC), 'model/encoder/' or 'encoder/' "
      f"(TF2); first names: {names[:5]}")


# Optional encoder tables (object path in a TF2 checkpoint -> the config
# field that creates them). A TF2 read skips what the model lacks, so a
# table the checkpoint has and the config leaves out would be dropped
# without a word.
_OPTIONAL_TABLES = (
    ("/embeddings/long_position_embedding/",
     "max_absolute_position_embeddings"),
    ("/embeddings/sentence_length_embedding/",
     "max_sentence_length_embeddings"),
)


def _check_optional_tables(encoder: tf.Module, prefix: str) -> None:
  names = [n for n, _ in tf.train.list_variables(prefix)]
  config = getattr(encoder, "config", None)
  for path, field in _OPTIONAL_TABLES:
    if config is not None and not getattr(config, field) and any(
        path in n and "OPTIMIZER_SLOT" not in n for n in names):
      raise UserInputError(
          f"{prefix}: the checkpoint's encoder has a table that "
          f"EtcConfig.{field} = 0 leaves out; set {field} as in the "
          f"checkpoint's config")


def initialize_encoder(encoder: tf.Module, path: str) -> CheckpointKind:
  """Loads encoder weights from `path` (a directory or a prefix).

  The encoder must already be built (variables created). Optimizer slots,
  `global_step` and head variables in the checkpoint are ignored.
  """
  prefix = resolve_checkpoint_path(path)
  kind = checkpoint_kind(prefix)
  logging.info("Initialising the encoder from %s (%s)", prefix, kind.value)
  if kind == CheckpointKind.OFFICIAL_TF1:
    load_official_checkpoint(encoder, prefix)
    return kind
  _check_optional_tables(encoder, prefix)
  if kind == CheckpointKind.TF2_TASK_MODEL:
    ckpt = tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=encoder))
  else:
    ckpt = tf.train.Checkpoint(encoder=encoder)
  # `read`, not `restore`: a checkpoint written with `Checkpoint.write` (the
  # converter's) has no save counter, which `restore` would expect.
  status = ckpt.read(prefix)
  # Every encoder variable must come from the checkpoint; anything else in it
  # (head, optimizer) is fine to skip.
  status.expect_partial().assert_existing_objects_matched()
  return kind
