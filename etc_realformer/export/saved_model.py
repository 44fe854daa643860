"""Exports a task model as a versioned SavedModel (TF Serving layout).

`EXPORT_DIR/<version>/` with `saved_model.pb`, `variables/`, `assets/`; the
version is an integer (seconds since the epoch, bumped if taken) so that TF
Serving, which serves the highest version, picks up the newest export. The
SavedModel is first written to a temporary sibling directory and renamed, so
a server polling EXPORT_DIR never sees a half-written version.

Signatures come from the task (`Task.serving_signatures`): at least
`serving_default` (batched feature tensors) and `serve_examples` (serialized
tf.Examples); tasks with a vocabulary add raw-input ones (`serve_raw`, one
record, and `serve_raw_batch`, a batch TF Serving can form; see README.md,
which lists every task's).
"""

import os
import time
from typing import Any, Dict, Mapping, Optional

from absl import logging
import tensorflow as tf


class ServingModule(tf.Module):
  """Holds what the signatures use, so that `tf.saved_model.save` tracks it."""

  def __init__(self, model: tf.Module, assets: Mapping[str, Any]):
    super().__init__(name="serving")
    # The weights, not the Keras model: saving a tf_keras model also traces
    # every layer's call functions for Keras' own metadata, which serving
    # never reads (most of an export's time).
    self.weights = list(model.variables)
    # Lookup tables / tokenizers (tracked so their files become assets).
    self.assets = dict(assets)


def _new_version_dir(export_dir_base: str, version: Optional[int]) -> str:
  version = int(time.time()) if version is None else int(version)
  while tf.io.gfile.exists(os.path.join(export_dir_base, str(version))):
    version += 1
  return os.path.join(export_dir_base, str(version))


def export_saved_model(model: tf.Module,
                       signatures: Dict[str, Any],
                       export_dir_base: str,
                       assets: Optional[Mapping[str, Any]] = None,
                       version: Optional[int] = None) -> str:
  """Saves `model` with `signatures` to `export_dir_base/<version>/`.

  Args:
    model: the Keras model (its variables are saved).
    signatures: name -> concrete function (or tf.function with a signature).
    export_dir_base: the TF Serving model base path.
    assets: extra trackables the signatures use (tables, tokenizers).
    version: integer version; default: the current time in seconds.

  Returns:
    The path of the new version directory.
  """
  if "serving_default" not in signatures:
    raise ValueError("signatures must include 'serving_default'")
  tf.io.gfile.makedirs(export_dir_base)
  final = _new_version_dir(export_dir_base, version)
  tmp = os.path.join(export_dir_base,
                     f".tmp-{os.path.basename(final)}-{os.getpid()}")
  module = ServingModule(model, assets or {})
  tf.saved_model.save(module, tmp, signatures=signatures)
  tf.io.gfile.rename(tmp, final)
  logging.info("Exported SavedModel with signatures %s to %s",
               sorted(signatures), final)
  return final


def export_task_model(task, model: tf.Module, export_dir_base: str,
                      version: Optional[int] = None) -> str:
  """Exports a `training.task.Task` model with the task's signatures."""
  signatures = task.serving_signatures(model)
  return export_saved_model(model, signatures, export_dir_base,
                            assets=task.export_assets(), version=version)
