"""This project's own (TF2, object-based) encoder checkpoints.

A converted checkpoint directory holds `etc_config.json` and a
`tf.train.Checkpoint(encoder=...)` named `encoder-1`. Training checkpoints of
the task models store the encoder under the same `encoder` attribute, so
`init_checkpoint` can point at either.
"""

import os

import tensorflow as tf

from etc_realformer.config import EtcConfig

CONFIG_NAME = "etc_config.json"
CHECKPOINT_NAME = "encoder"


def save_converted_checkpoint(model, output_dir: str) -> str:
  """Writes `model`'s config and weights; returns the checkpoint path."""
  tf.io.gfile.makedirs(output_dir)
  model.config.to_json_file(os.path.join(output_dir, CONFIG_NAME))
  checkpoint = tf.train.Checkpoint(encoder=model)
  return checkpoint.write(os.path.join(output_dir, CHECKPOINT_NAME + "-1"))


def load_converted_checkpoint(model, path: str) -> None:
  """Restores an encoder written by `save_converted_checkpoint`.

  Args:
    model: an `EtcModel` with the checkpoint's config (built on demand).
    path: the converted directory or checkpoint prefix.

  Raises:
    AssertionError (from TF) when a model variable is not in the checkpoint.
  """
  if tf.io.gfile.isdir(path):
    path = tf.train.latest_checkpoint(path) or os.path.join(
        path, CHECKPOINT_NAME + "-1")
  if not model.built:
    model.build()
  status = tf.train.Checkpoint(encoder=model).read(path)
  status.assert_existing_objects_matched().expect_partial()


def read_config(directory: str) -> EtcConfig:
  return EtcConfig.from_json_file(os.path.join(directory, CONFIG_NAME))
