"""Tests for tasks.common.inputs.json_files: JSON inputs whose errors name
the file, repeated keys refused."""

import pytest

from etc_realformer.errors import UserInputError
from tasks.common.inputs import input_errors
from tasks.common.inputs import json_files
from tasks.common.inputs import record_checks


def test_load_json_array_errors_name_the_file(tmp_path):
  missing = tmp_path / "missing.json"
  with pytest.raises(input_errors.InputFileError,
                     match="missing.json.*cannot read"):
    json_files.load_json_array(str(missing))
  empty = tmp_path / "empty.json"
  empty.write_text("  \n")
  with pytest.raises(input_errors.InputFileError, match="empty.json.*empty"):
    json_files.load_json_array(str(empty))
  broken = tmp_path / "broken.json"
  broken.write_text('[{"id": 1,')
  with pytest.raises(
      input_errors.InputFileError, match="broken.json.*not valid"):
    json_files.load_json_array(str(broken))
  obj = tmp_path / "obj.json"
  obj.write_text('{"id": 1}')
  with pytest.raises(input_errors.InputFileError, match="obj.json.*JSON array"):
    json_files.load_json_array(str(obj))
  assert json_files.load_json(str(obj)) == {"id": 1}
  directory = tmp_path / "adir.json"
  directory.mkdir()
  with pytest.raises(input_errors.InputFileError, match="adir.json"):
    json_files.load_json_array(str(directory))
  assert issubclass(input_errors.InputFileError, UserInputError)


def test_invalid_utf8_is_kept_per_record(tmp_path):
  path = tmp_path / "bytes.json"
  path.write_bytes(b'[{"q": "ok"}, {"q": "bad \xff byte"}]')
  data = json_files.load_json_array(str(path))
  assert record_checks.is_decodable(data[0]["q"])
  assert not record_checks.is_decodable(data[1]["q"])


def test_load_json_unique_keys_refuses_a_repeated_key(tmp_path):
  path = tmp_path / "predictions.json"
  path.write_text('{"q1": "a", "q2": "b", "q1": "c"}')
  assert json_files.load_json(str(path)) == {"q1": "c", "q2": "b"}
  with pytest.raises(input_errors.DuplicateIdError,
                     match=r"predictions.json: key 'q1' is duplicated: "
                     r"entries #0 and #2"):
    json_files.load_json(str(path), unique_keys=True)
