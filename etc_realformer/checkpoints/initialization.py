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
import re
from typing import Dict, List

from absl import logging
import tensorflow as tf
from tensorflow.python.checkpoint import graph_view

from etc_realformer.checkpoints.official import CheckpointMismatchError
from etc_realformer.checkpoints.official import load_official_checkpoint
from etc_realformer.checkpoints.official import mismatch_report
from etc_realformer.checkpoints.paths import list_checkpoint_variables
from etc_realformer.checkpoints.paths import resolve_checkpoint_path
from etc_realformer.checkpoints.paths import UNREADABLE
from etc_realformer.checkpoints.paths import unreadable_detail
from etc_realformer.errors import UserInputError

OFFICIAL_ROOT = "etc_document_bert/"
_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


class CheckpointKind(enum.Enum):
  OFFICIAL_TF1 = "official_tf1"
  TF2_TASK_MODEL = "tf2_task_model"
  TF2_ENCODER = "tf2_encoder"


def checkpoint_kind(prefix: str) -> CheckpointKind:
  names: List[str] = [n for n, _ in list_checkpoint_variables(prefix)]
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
  names = [n for n, _ in list_checkpoint_variables(prefix)]
  config = getattr(encoder, "config", None)
  for path, field in _OPTIONAL_TABLES:
    if config is not None and not getattr(config, field) and any(
        path in n and "OPTIMIZER_SLOT" not in n for n in names):
      raise UserInputError(
          f"{prefix}: the checkpoint's encoder has a table that "
          f"EtcConfig.{field} = 0 leaves out; set {field} as in the "
          f"checkpoint's config")


_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
_LAYER = re.compile(r"^blocks/(\d+)/")


def _model_keys(encoder: tf.Module) -> Dict[str, List[int]]:
  """The encoder's variables as a TF2 checkpoint of it keys them (the path
  of attribute names from the encoder, the first of a shared variable's
  paths, as `Checkpoint.write` takes them) -> shape."""
  root = tf.train.Checkpoint(encoder=encoder)  # the view keeps a weakref
  view = graph_view.ObjectGraphView(root)
  objects, paths = view.breadth_first_traversal()
  keys = {}
  for obj in objects:
    if isinstance(obj, tf.Variable):
      names = [ref.name for ref in paths[obj]]
      keys["/".join(names[1:])] = obj.shape.as_list()
  return keys


def _layer_count(keys) -> int:
  return len({m[1] for m in map(_LAYER.match, keys) if m})


def _check_tf2(encoder: tf.Module, prefix: str, root: str) -> None:
  """Checks the encoder variables of the checkpoint (under `root`) against
  the model before anything is assigned: a TF2 read skips checkpoint values
  the model has no variable for (the layers above the model's depth), and
  assigns variable after variable until one of another shape stops it.

  A model variable keyed elsewhere in the checkpoint is not missing: a
  variable shared with a head (the pre-training head's token embeddings)
  is written under whichever path the writer reached first. Those are
  left to the read's own matching (`initialize_encoder` undoes a read that
  fails).

  Raises:
    CheckpointMismatchError: naming the checkpoint, every unexpected and
      mis-shaped variable, and both layer counts when they differ.
  """
  shapes = {}
  for name, shape in list_checkpoint_variables(prefix):
    if (name.startswith(root) and name.endswith(_VALUE) and
        "OPTIMIZER_SLOT" not in name):
      shapes[name[len(root):-len(_VALUE)]] = shape
  expected = _model_keys(encoder)
  title = f"checkpoint {prefix} does not match the model config:"
  layers = (_layer_count(shapes), _layer_count(expected))
  if layers[0] != layers[1]:
    title = (f"checkpoint {prefix} has {layers[0]} layers, the model "
             f"{layers[1]} (EtcConfig.num_hidden_layers); it does not match "
             "the model config:")
  report = mismatch_report(
      title, shapes,
      {k: v for k, v in expected.items() if k in shapes or layers[0] !=
       layers[1] and _LAYER.match(k)},
      sorted(set(shapes) - set(expected)), (), "")
  if report:
    raise CheckpointMismatchError(report)


def initialize_encoder(encoder: tf.Module, path: str) -> CheckpointKind:
  """Loads encoder weights from `path` (a directory or a prefix).

  The encoder must already be built (variables created). Optimizer slots,
  `global_step` and head variables in the checkpoint are ignored. All or
  nothing: a checkpoint whose encoder does not match the model (a variable
  missing, left over or of another shape, e.g. more layers) raises before
  any variable is assigned.

  Raises:
    UserInputError: naming the checkpoint (a `CheckpointMismatchError` when
      it does not fit).
  """
  prefix = resolve_checkpoint_path(path)
  kind = checkpoint_kind(prefix)
  logging.info("Initialising the encoder from %s (%s)", prefix, kind.value)
  if kind == CheckpointKind.OFFICIAL_TF1:
    load_official_checkpoint(encoder, prefix)
    return kind
  _check_optional_tables(encoder, prefix)
  _check_tf2(encoder, prefix, "model/encoder/"
             if kind == CheckpointKind.TF2_TASK_MODEL else "encoder/")
  if kind == CheckpointKind.TF2_TASK_MODEL:
    ckpt = tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=encoder))
  else:
    ckpt = tf.train.Checkpoint(encoder=encoder)
  # `read`, not `restore`: a checkpoint written with `Checkpoint.write` (the
  # converter's) has no save counter, which `restore` would expect.
  # What the check above cannot see (a damaged file, a variable stored
  # under a head's path that does not fit) fails the read part-way: the
  # values from before it are put back, so nothing is partially loaded.
  before = [(v, v.numpy()) for v in encoder.weights]
  try:
    status = ckpt.read(prefix)
    # Every encoder variable must come from the checkpoint; anything else
    # in it (head, optimizer) is fine to skip.
    status.expect_partial().assert_existing_objects_matched()
  except (*UNREADABLE, ValueError, AssertionError) as e:
    for variable, value in before:
      variable.assign(value)
    if isinstance(e, UNREADABLE):
      raise UserInputError(f"{prefix}: the checkpoint cannot be read "
                           f"({unreadable_detail(e)})") from e
    names = sorted(set(re.findall(r"<tf\.Variable '([^']+)'", str(e))))
    raise CheckpointMismatchError(
        f"checkpoint {prefix} does not match the model config: "
        f"{', '.join(names) or str(e).splitlines()[0]}") from e
  return kind
