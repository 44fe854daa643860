"""Tests for etc_realformer.data.tfrecords: writing and parsing by spec."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.data import tfrecords


def test_tfrecord_round_trip_with_spec(tmp_path):
  spec = {
      "ids": (tf.int32, (3,)),
      "label": (tf.int32, ()),
      "name": (tf.string, ()),
      "options": (tf.string, (None,)),
      "score": (tf.float32, (2,)),
  }
  rows = [
      dict(ids=np.array([1, -1, 7]), label=np.int32(2), name=b"a",
           options=np.array([b"x", b"y"]), score=np.array([0.5, 1.5])),
      dict(ids=np.array([0, 0, 0]), label=np.int32(-1), name="b",
           options=np.array(["z"]), score=np.array([0.0, -1.0])),
  ]
  path = str(tmp_path / "x.tfrecord")
  n = tfrecords.write_tfrecord(
      path, (tfrecords.to_tf_example(r, spec) for r in rows))
  assert n == 2
  got = list(tfrecords.make_dataset(path, spec).as_numpy_iterator())
  assert got[0]["ids"].dtype == np.int32
  np.testing.assert_array_equal(got[0]["ids"], [1, -1, 7])
  assert got[1]["label"] == -1 and got[1]["name"] == b"b"
  assert got[0]["options"].tolist() == [b"x", b"y"]
  assert got[1]["options"].tolist() == [b"z"]
  np.testing.assert_allclose(got[1]["score"], [0.0, -1.0])
  with pytest.raises(ValueError, match="'ids': shape"):
    tfrecords.to_tf_example(dict(rows[0], ids=np.zeros(4)), spec)
  with pytest.raises(FileNotFoundError, match="no TFRecord file"):
    tfrecords.make_dataset(str(tmp_path / "none*"), spec)
