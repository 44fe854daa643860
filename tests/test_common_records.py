"""Tests for tasks.common.records and tasks.common.tfrecords."""

import json

import numpy as np
import pytest
import tensorflow as tf

from tasks.common import records
from tasks.common import tfrecords


def test_load_json_array_errors_name_the_file(tmp_path):
  missing = tmp_path / "missing.json"
  with pytest.raises(records.InputFileError, match="missing.json.*cannot read"):
    records.load_json_array(str(missing))
  empty = tmp_path / "empty.json"
  empty.write_text("  \n")
  with pytest.raises(records.InputFileError, match="empty.json.*empty"):
    records.load_json_array(str(empty))
  broken = tmp_path / "broken.json"
  broken.write_text('[{"id": 1,')
  with pytest.raises(records.InputFileError, match="broken.json.*not valid"):
    records.load_json_array(str(broken))
  obj = tmp_path / "obj.json"
  obj.write_text('{"id": 1}')
  with pytest.raises(records.InputFileError, match="obj.json.*JSON array"):
    records.load_json_array(str(obj))
  directory = tmp_path / "adir.json"
  directory.mkdir()
  with pytest.raises(records.InputFileError, match="adir.json"):
    records.load_json_array(str(directory))


def test_invalid_utf8_is_kept_per_record(tmp_path):
  path = tmp_path / "bytes.json"
  path.write_bytes(b'[{"q": "ok"}, {"q": "bad \xff byte"}]')
  data = records.load_json_array(str(path))
  assert records.is_decodable(data[0]["q"])
  assert not records.is_decodable(data[1]["q"])


def test_stats_skip_and_strict():
  error = records.BadRecordError("f.json", "r1", "answer", "some_reason",
                                 "why")
  assert str(error) == ("f.json: record 'r1', field 'answer': some_reason "
                        "(why)")
  stats = records.RecordStats(input_file="f.json")
  stats.handle_bad_record(error)
  stats.add_truncation({"a": 0})
  stats.add_truncation({"a": 3})
  d = stats.to_dict()
  assert d["skipped"] == {"some_reason": 1}
  assert d["skipped_records"] == [dict(file="f.json", id="r1", field="answer",
                                       reason="some_reason", detail="why")]
  assert d["examples_truncated"] == 1 and d["truncation"] == {"a": 3}
  json.dumps(d)
  with pytest.raises(records.BadRecordError, match="record 'r1'"):
    records.RecordStats(strict=True).handle_bad_record(error)


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
  with pytest.raises(ValueError, match="no TFRecord file"):
    tfrecords.make_dataset(str(tmp_path / "none*"), spec)
