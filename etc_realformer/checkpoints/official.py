"""Loading the released ETC checkpoints (TF1, name-based) into `EtcModel`.

The released checkpoints (`etc_base_2x_pretrain`, `etc_large`, ...) were saved
by `tf.compat.v1.train.Saver`: variables are addressed by name
(`etc_document_bert/...`), not by object graph, so `tf.train.Checkpoint`
cannot read them. We build the name -> variable map from the model's own
structure (`EtcModel.official_variables`) and check the whole checkpoint
against it before assigning anything: a mismatch raises one error listing
every missing, unexpected and mis-shaped variable, and nothing is ever
partially loaded.
"""

import os
import re
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf

from etc_realformer.checkpoints.paths import list_checkpoint_variables
from etc_realformer.checkpoints.paths import read_checkpoint_tensors
from etc_realformer.checkpoints.paths import resolve_checkpoint_path
from etc_realformer.errors import UserInputError
from etc_realformer.networks.etc_model import ROOT_LEVEL_TABLES

# Optimizer slots and bookkeeping that a released checkpoint may hold.
_SKIPPED = re.compile(
    r"(^global_step$)|(/(adam_m|adam_v|Adam|Adam_1|lamb_m|lamb_v|Momentum|"
    r"Adagrad|ExponentialMovingAverage|accumulator|slot_\w+)$)|"
    r"(^(beta1_power|beta2_power)$)|(^_CHECKPOINTABLE_OBJECT_GRAPH$)")


class LoadReport(NamedTuple):
  """What `load_official_checkpoint` did."""
  path: str
  loaded: List[str]
  skipped: List[str]   # optimizer slots, global_step
  ignored: List[str]   # variables outside the encoder (e.g. pre-training heads)


class CheckpointMismatchError(UserInputError):
  """The checkpoint does not fit the model; the message lists every problem."""


def is_official_checkpoint(path: str, root: str = "etc_document_bert") -> bool:
  """Whether `path` is a name-based checkpoint with ETC encoder variables."""
  prefix = resolve_checkpoint_path(path)
  names = list_checkpoint_variables(prefix)
  return any(name.startswith(root + "/") for name, _ in names)


def checkpoint_names(model, root: str = "etc_document_bert"
                     ) -> Dict[str, tf.Variable]:
  """The model's variables by their names in a released-format checkpoint
  whose encoder scope is `root` (the absolute position tables sit at the
  checkpoint's root, as the original writes them)."""
  scope = model.name + "/"
  return {(f"{root}/{name[len(scope):]}" if name.startswith(scope)
           else name): var
          for name, var in model.official_variables().items()}


def load_official_checkpoint(model, path: str,
                             root: str = "etc_document_bert") -> LoadReport:
  """Loads a released ETC checkpoint into `model` (an `EtcModel`).

  Args:
    model: an `EtcModel` (built on demand).
    path: checkpoint prefix (`.../model.ckpt`), its directory, or its
      `.index` file.
    root: the checkpoint's top-level scope of the encoder.

  Returns:
    A `LoadReport`.

  Raises:
    CheckpointMismatchError: listing every missing, unexpected and mis-shaped
      variable; the model is left untouched.
  """
  prefix = resolve_checkpoint_path(path)
  shapes = dict(list_checkpoint_variables(prefix))
  expected = checkpoint_names(model, root)

  skipped, ignored, unexpected = [], [], []
  for name in sorted(shapes):
    if _SKIPPED.search(name):
      skipped.append(name)
    elif name in expected:
      continue
    elif name.startswith(root + "/") or name.startswith(ROOT_LEVEL_TABLES):
      unexpected.append(name)
    else:
      ignored.append(name)
  report = mismatch_report(
      f"checkpoint {prefix} does not match the model config:", shapes,
      {name: var.shape.as_list() for name, var in expected.items()},
      unexpected, _SHARING_HINTS,
      "the sharing/size options that decide these names: {} (check the "
      "checkpoint's etc_config.json)")
  if report:
    raise CheckpointMismatchError(report)

  # Every value read before the first is assigned: a damaged data file
  # fails here with the model untouched.
  values = read_checkpoint_tensors(prefix, expected)
  for name, var in expected.items():
    var.assign(tf.cast(values[name], var.dtype))
  if ignored:
    logging.info("%s: %d variables outside %s/ ignored (e.g. %s)", prefix,
                 len(ignored), root, ignored[0])
  logging.info("loaded %d variables from %s", len(expected), prefix)
  return LoadReport(prefix, sorted(expected), skipped, ignored)


def mismatch_report(title: str, shapes: Mapping[str, List[int]],
                    expected: Mapping[str, List[int]], unexpected: List[str],
                    hints: Sequence[Tuple[str, str]],
                    hint_format: str) -> Optional[str]:
  """The one error message of a checkpoint that does not fit a model, or
  None when it fits.

  Args:
    title: the first line.
    shapes: the checkpoint's variable name -> shape.
    expected: the model's variable name (in the checkpoint) -> shape.
    unexpected: checkpoint names that the model does not have (and that are
      not to be skipped).
    hints: (regular expression, config field) pairs: a field is named when
      its expression matches one of the mismatched names.
    hint_format: the hint line, with "{}" for the named fields.
  """
  missing = sorted(set(expected) - set(shapes))
  misshaped = [f"{name}: checkpoint {shapes[name]} vs model {shape}"
               for name, shape in sorted(expected.items())
               if name in shapes and list(shapes[name]) != list(shape)]
  if not (missing or unexpected or misshaped):
    return None
  lines = [title]
  for heading, items in (("missing from the checkpoint", missing),
                         ("unexpected in the checkpoint", unexpected),
                         ("mis-shaped", misshaped)):
    if items:
      lines.append(f"  {heading} ({len(items)}):")
      lines.extend(f"    {item}" for item in items)
  text = " ".join(missing + unexpected + misshaped)
  fields = [field for pattern, field in hints if re.search(pattern, text)]
  if fields:
    lines.append("  hint: " + hint_format.format(", ".join(fields)))
  return "\n".join(lines)


# Which config option decides a checkpoint name, for the mismatch hint.
_SHARING_HINTS = (
    (r"global_query_projection|g2g_key_projection", "share_qkv_projections"),
    (r"l2g_key_projection|g2l_key_projection", "share_kv_projections"),
    (r"global_output_projection", "share_att_output_projection"),
    (r"(long|global)_feed_forward_layer|/feed_forward_layer_",
     "share_feed_forward_params"),
    (r"token_emb_lookup/projection", "embedding_size"),
    (r"position_emb_lookup", "max_absolute_position_embeddings"),
    (r"sentence_length_emb_lookup", "max_sentence_length_embeddings"),
    (r"relative_", "relative_vocab_size"),
)


def save_official_checkpoint(model, prefix: str,
                             root: str = "etc_document_bert",
                             extra: Optional[Mapping[str, Any]] = None) -> str:
  """Writes the encoder as a name-based checkpoint in the released layout.

  The file reads back with `load_official_checkpoint` here and with
  `tf.compat.v1.train.Saver` / the original ETC code. Useful to hand a
  fine-tuned encoder to TF1 tooling, and to test loading for every option.

  Args:
    model: an `EtcModel`.
    prefix: output checkpoint prefix, e.g. `.../model.ckpt`.
    root: top-level scope name.
    extra: more tensors to write by name (e.g. a pre-training head at the
      checkpoint's root).

  Returns:
    `prefix`.
  """
  variables = dict(checkpoint_names(model, root))
  for name, value in (extra or {}).items():
    if name in variables:
      raise ValueError(f"extra tensor {name!r} is a model variable")
    variables[name] = value
  names = sorted(variables)
  tf.io.gfile.makedirs(os.path.dirname(prefix) or ".")
  # SaveV2 is exactly what `tf.compat.v1.train.Saver` runs underneath; it
  # works eagerly, where the v1 Saver does not.
  tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names,
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.convert_to_tensor(variables[n]) for n in names])
  return prefix
