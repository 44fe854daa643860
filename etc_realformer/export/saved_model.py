"""Exports a task model as a versioned SavedModel (TF Serving layout).

`EXPORT_DIR/<version>/` with `saved_model.pb`, `variables/`, `assets/`; the
version is an integer (seconds since the epoch, bumped if taken) so that TF
Serving, which serves the highest version, picks up the newest export. The
SavedModel is first written to a temporary sibling directory and renamed, so
a server polling EXPORT_DIR never sees a half-written version.

Signatures come from the task (`Task.serving_signatures`): at least
`serving_default` (batched feature tensors) and `serve_examples` (serialized
tf.Examples); tasks add raw-input ones (WikiHop: `serve_raw`).

Everything is traced with the fused CPU kernels off (`kernel_build.disabled`):
TF Serving (and `tf.saved_model.load` in a process that has not loaded the
kernel library) has no such ops, so the exported graphs use the TensorFlow
path, which computes the same function.
"""

import os
import time
from typing import Any, Dict, Mapping, Optional, Set

from absl import logging
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-direct-tensorflow-import

from etc_realformer.kernels import build as kernel_build


class ServingModule(tf.Module):
  """Holds what the signatures use, so that `tf.saved_model.save` tracks it."""

  def __init__(self, model: tf.Module, assets: Mapping[str, Any]):
    super().__init__(name="serving")
    self.model = model
    # Lookup tables / tokenizers (tracked so their files become assets).
    self.assets = dict(assets)


def _op_types(saved_model_dir: str) -> Set[str]:
  """Every op type in a SavedModel's graphs and function library."""
  proto = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(os.path.join(saved_model_dir, "saved_model.pb"),
                         "rb") as f:
    proto.ParseFromString(f.read())
  types = set()
  for meta_graph in proto.meta_graphs:
    types.update(n.op for n in meta_graph.graph_def.node)
    for fn in meta_graph.graph_def.library.function:
      types.update(n.op for n in fn.node_def)
  return types


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
  with kernel_build.disabled():
    tf.saved_model.save(module, tmp, signatures=signatures)
  kernel_ops = sorted(_op_types(tmp) & set(kernel_build.OP_TYPES))
  if kernel_ops:
    tf.io.gfile.rmtree(tmp)
    raise ValueError(
        f"The SavedModel would contain the fused CPU kernel ops {kernel_ops}, "
        "which TF Serving does not have: a signature was traced before the "
        "export. Pass tf.functions (traced here), or trace them inside "
        "`etc_realformer.kernels.build.disabled()`.")
  tf.io.gfile.rename(tmp, final)
  logging.info("Exported SavedModel with signatures %s to %s",
               sorted(signatures), final)
  return final


def export_task_model(task, model: tf.Module, export_dir_base: str,
                      version: Optional[int] = None) -> str:
  """Exports a `tasks.base.Task` model with the task's signatures."""
  with kernel_build.disabled():
    signatures = task.serving_signatures(model)
    return export_saved_model(model, signatures, export_dir_base,
                              assets=task.export_assets(), version=version)
