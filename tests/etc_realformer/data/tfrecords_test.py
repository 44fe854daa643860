"""Tests for etc_realformer.data.tfrecords: writing and parsing by spec."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError


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


def test_first_record_is_checked_against_the_readers_spec(tmp_path):
  made = {"token_ids": (tf.int32, (4,)), "name": (tf.string, ())}
  path = str(tmp_path / "x.tfrecord")
  tfrecords.write_tfrecord(path, [tfrecords.to_tf_example(
      {"token_ids": np.arange(4), "name": "a"}, made)])
  tfrecords.check_first_record(path, made)
  # Read at another length: the file, the feature and both lengths.
  with pytest.raises(UserInputError, match=r"x\.tfrecord: record 0, feature "
                     r"'token_ids' has 4 values where the reader expects 8 "
                     r".*; lengths\?"):
    tfrecords.check_first_record(path, {"token_ids": (tf.int32, (8,))},
                                 hint="lengths?")
  with pytest.raises(UserInputError, match="no feature 'labels'"):
    tfrecords.check_first_record(path, {"labels": (tf.int32, ())})
  with pytest.raises(UserInputError, match="'name': stored as bytes_list"):
    tfrecords.check_first_record(path, {"name": (tf.int32, ())})
  # Variable lengths are not checked; an empty file has nothing to check.
  tfrecords.check_first_record(path, {"token_ids": (tf.int32, (None,))})
  empty = str(tmp_path / "empty.tfrecord")
  tfrecords.write_tfrecord(empty, [])
  tfrecords.check_first_record(empty, made)
  text = tmp_path / "notes.txt"
  text.write_text("these are not records\n" * 10)
  with pytest.raises(UserInputError, match="notes.txt: not a TFRecord"):
    tfrecords.check_first_record(str(text), made)


def test_first_example_of_a_file(tmp_path):
  spec = {"token_ids": (tf.int32, (2,))}
  path = str(tmp_path / "x.tfrecord")
  tfrecords.write_tfrecord(path, [
      tfrecords.to_tf_example({"token_ids": np.array([3, 4])}, spec),
      tfrecords.to_tf_example({"token_ids": np.array([5, 6])}, spec)])
  first = tfrecords.first_example(path)
  assert first.features.feature["token_ids"].int64_list.value == [3, 4]
  empty = str(tmp_path / "empty.tfrecord")
  tfrecords.write_tfrecord(empty, [])
  assert tfrecords.first_example(empty) is None
