"""Tests for tools/gpu/xla_export.py on a tiny `jit_compile` step: the module,
the inputs and the manifest it writes, in the entry's parameter order."""

import gzip
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.xla import xla_data_pb2
from tensorflow.compiler.xla.service import hlo_pb2

from tools.gpu import xla_export


def _tiny_step():
  """A step over two features (one nested) that captures a variable and a
  constant: sum(x @ w + c) + sum(ids)."""
  w = tf.Variable([[1.0, 2.0, 0.0], [3.0, 4.0, 0.0]], name="w")
  c = tf.constant([10.0, 20.0, 30.0])

  @tf.function(jit_compile=True)
  def step(features):
    y = tf.matmul(features["x"], w) + c
    return tf.reduce_sum(y) + tf.cast(
        tf.reduce_sum(features["a"]["ids"]), tf.float32)

  features = {"x": tf.ones([4, 2]),
              "a": {"ids": tf.constant([1, 2, 3, 4, 5], tf.int32)}}
  return step, features, w


# sum(ones[4, 2] @ w) = 4 * 10; + c over 4 rows = 4 * 60; + sum(ids) = 15.
REFERENCE = 4 * 10 + 4 * 60 + 15


def _read(directory):
  with open(os.path.join(directory, "manifest.json")) as f:
    manifest = json.load(f)
  with np.load(os.path.join(directory, "inputs.npz")) as data:
    inputs = {k: data[k] for k in data.files}
  with gzip.open(os.path.join(directory, xla_export.MODULE_FILE)) as f:
    hlo = f.read()
  return manifest, inputs, hlo


def test_nest_paths_follow_tf_nest_order():
  # Each leaf is its own path: flattening gives the paths in order.
  structure = {"b": "b", "a": {"z": "a/z", "y": {"x": "a/y/x"}}, "c": "c"}
  paths = xla_export.nest_paths(structure)
  assert paths == ["a/y/x", "a/z", "b", "c"]
  assert paths == tf.nest.flatten(structure)
  assert xla_export.nest_paths(7) == [""]


def test_writes_module_inputs_and_manifest(tmp_path):
  step, features, w = _tiny_step()
  directory = str(tmp_path / "out" / "tiny")  # Made by the export.
  spec = {"export_dir": directory, "pass": "fwd", "long_len": 5,
          "xla_reference": True}
  summary = xla_export.write_module(tf, step, features, [w], spec)
  manifest, inputs, hlo = _read(directory)
  assert summary["export_dir"] == directory
  assert summary["num_arguments"] == 4
  assert summary["hlo_bytes"] == len(hlo) > 0
  assert summary["reference_value"] == pytest.approx(REFERENCE)
  assert manifest["reference_value"] == pytest.approx(REFERENCE)
  assert manifest["spec"] == {"pass": "fwd", "long_len": 5,
                              "xla_reference": True}
  assert manifest["tensorflow_version"] == tf.__version__
  # Features in tf.nest order (sorted keys), then the captures in order.
  assert manifest["arguments"] == [
      {"name": "feature/a/ids", "shape": [5], "dtype": "int32",
       "stored": True},
      {"name": "feature/x", "shape": [4, 2], "dtype": "float32",
       "stored": True},
      {"name": "variable/w:0", "shape": [2, 3], "dtype": "float32",
       "stored": True},
      {"name": "captured", "shape": [3], "dtype": "float32",
       "stored": True}]
  assert sorted(inputs) == ["arg_0000", "arg_0001", "arg_0002", "arg_0003"]
  assert [inputs[k].shape for k in sorted(inputs)] == [(5,), (4, 2), (2, 3),
                                                        (3,)]
  np.testing.assert_array_equal(inputs["arg_0000"], [1, 2, 3, 4, 5])
  np.testing.assert_array_equal(inputs["arg_0002"], w.numpy())
  np.testing.assert_array_equal(inputs["arg_0003"], [10.0, 20.0, 30.0])
  # The module's entry takes the arguments in the manifest's order.
  program = hlo_pb2.HloModuleProto.FromString(hlo).host_program_shape
  assert [(xla_data_pb2.PrimitiveType.Name(p.element_type).lower(),
           list(p.dimensions)) for p in program.parameters] == [
               ("s32", [5]), ("f32", [4, 2]), ("f32", [2, 3]), ("f32", [3])]


def test_without_weights_the_variables_are_listed_not_stored(tmp_path):
  step, features, w = _tiny_step()
  spec = {"export_dir": str(tmp_path), "xla_weights": False,
          "xla_reference": True}
  summary = xla_export.write_module(tf, step, features, [w], spec)
  manifest, inputs, _ = _read(str(tmp_path))
  assert [a["stored"] for a in manifest["arguments"]] == [True, True, False,
                                                          True]
  assert manifest["arguments"][2]["shape"] == [2, 3]
  assert sorted(inputs) == ["arg_0000", "arg_0001", "arg_0003"]
  # No reference without every value: a runner's would differ.
  assert "reference_value" not in manifest
  assert summary["reference_value"] is None
  assert summary["num_arguments"] == 4


def test_a_captured_variable_not_in_the_list_is_refused(tmp_path):
  step, features, _ = _tiny_step()
  other = tf.Variable(1.0, name="other")
  with pytest.raises(ValueError, match="no model variable"):
    xla_export.write_module(tf, step, features, [other],
                            {"export_dir": str(tmp_path)})
