"""Export mechanics with a stand-in Keras model (the real one: e2e test)."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from etc_realformer.export import saved_model


def _standin():
  model = tf_keras.Sequential([tf_keras.layers.Dense(2)])
  model.build([None, 3])

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32,
                                              name="x")])
  def serving_default(x):
    return {"y": model(x)}

  table = tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(["a", "b"], [1, 2]), -1)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string,
                                              name="words")])
  def lookup(words):
    return {"ids": table.lookup(words)}

  return model, table, {"serving_default": serving_default,
                        "lookup": lookup.get_concrete_function()}


def test_versioned_layout_and_signatures(tmp_path):
  model, table, signatures = _standin()
  base_dir = str(tmp_path / "export")
  first = saved_model.export_saved_model(model, signatures, base_dir,
                                         assets={"table": table}, version=7)
  assert first == os.path.join(base_dir, "7")
  # A taken version is bumped, never overwritten; no temp dirs are left.
  second = saved_model.export_saved_model(model, signatures, base_dir,
                                          assets={"table": table}, version=7)
  assert second == os.path.join(base_dir, "8")
  assert sorted(os.listdir(base_dir)) == ["7", "8"]
  default = saved_model.export_saved_model(model, signatures, base_dir,
                                           assets={"table": table})
  assert int(os.path.basename(default)) > 8  # seconds since the epoch

  loaded = tf.saved_model.load(first)
  assert sorted(loaded.signatures) == ["lookup", "serving_default"]
  x = np.ones([2, 3], np.float32)
  np.testing.assert_allclose(
      loaded.signatures["serving_default"](x=tf.constant(x))["y"].numpy(),
      model(x).numpy(), rtol=1e-6)
  ids = loaded.signatures["lookup"](words=tf.constant(["b", "z"]))["ids"]
  assert ids.numpy().tolist() == [2, -1]


def test_serving_default_is_required(tmp_path):
  model, _, signatures = _standin()
  del signatures["serving_default"]
  with pytest.raises(ValueError, match="serving_default"):
    saved_model.export_saved_model(model, signatures, str(tmp_path))
