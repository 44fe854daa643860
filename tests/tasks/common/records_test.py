"""Tests for tasks.common.records: JSON inputs, bad records, stats, the JSON
writer and the manual-download lookup."""

import errno
import json
import os

import pytest
import tensorflow as tf

from etc_realformer.errors import UserInputError
from tasks.common import records


def test_load_json_array_errors_name_the_file(tmp_path):
  missing = tmp_path / "missing.json"
  with pytest.raises(records.InputFileError,
                     match="missing.json.*cannot read"):
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
  assert records.load_json(str(obj)) == {"id": 1}
  directory = tmp_path / "adir.json"
  directory.mkdir()
  with pytest.raises(records.InputFileError, match="adir.json"):
    records.load_json_array(str(directory))
  assert issubclass(records.InputFileError, UserInputError)


def test_invalid_utf8_is_kept_per_record(tmp_path):
  path = tmp_path / "bytes.json"
  path.write_bytes(b'[{"q": "ok"}, {"q": "bad \xff byte"}]')
  data = records.load_json_array(str(path))
  assert records.is_decodable(data[0]["q"])
  assert not records.is_decodable(data[1]["q"])


@pytest.mark.parametrize("value, allow_empty, reason", [
    (3, False, records.WRONG_TYPE),
    ("bad \udcff", False, records.UNDECODABLE_TEXT),
    ("  ", False, records.EMPTY_TEXT),
])
def test_check_text_names_record_and_field(value, allow_empty, reason):
  with pytest.raises(records.BadRecordError) as e:
    records.check_text(value, "f.json", "r7", "query", allow_empty)
  assert e.value.reason == reason
  assert str(e.value).startswith("f.json: record 'r7', field 'query': ")
  assert records.check_text("  ", "f.json", "r7", "q", True) == "  "


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


def test_write_json_keeps_text_and_ends_with_a_newline(tmp_path):
  path = str(tmp_path / "out.json")
  records.write_json(path, {"b": "Café", "a": [1]}, sort_keys=True)
  with open(path, encoding="utf-8") as f:
    text = f.read()
  assert text.endswith("}\n") and "Café" in text
  assert text.index('"a"') < text.index('"b"')
  assert json.loads(text) == {"a": [1], "b": "Café"}


def test_find_manual_file_looks_in_the_subdirs_in_order(tmp_path):
  (tmp_path / "sub").mkdir()
  (tmp_path / "sub" / "x.json").write_text("[]")
  found = records.find_manual_file(str(tmp_path), "x.json", ("", "sub"))
  assert found == str(tmp_path / "sub" / "x.json")
  with pytest.raises(records.InputFileError,
                     match=r"y.json not found .*/sub'\]\). Download it"):
    records.find_manual_file(str(tmp_path), "y.json", ("", "sub"),
                             "Download it.")


def test_unique_ids_refuse_a_repeat_or_skip_and_count_it(tmp_path):
  path = tmp_path / "dev.json"
  path.write_text(json.dumps([{"id": "a", "v": 1}, {"id": "b", "v": 2},
                              {"id": "a", "v": 3}]))

  def validate(raw, file, index):
    del file, index  # Unused.
    return raw

  def read(**kwargs):
    stats = records.RecordStats(input_file=str(path), **kwargs)
    kept = list(records.read_json_records(str(path), validate, stats,
                                          id_of=lambda r: r["id"]))
    return kept, stats

  with pytest.raises(records.DuplicateIdError,
                     match=r"dev.json: id 'a' is duplicated: record #0 and "
                     r"record #2; .*--skip_duplicate_ids"):
    read()
  kept, stats = read(skip_duplicate_ids=True)
  assert [r["v"] for r in kept] == [1, 2]  # The first one is kept.
  assert stats.skipped == {records.DUPLICATE_ID: 1}
  assert stats.skipped_records == [dict(
      file=str(path), id="a", field="id", reason=records.DUPLICATE_ID,
      detail="record #2 repeats record #0")]
  assert "skip_duplicate_ids" not in stats.to_dict()  # A setting.
  # Under strict, the skip is a failure like any bad record.
  with pytest.raises(records.BadRecordError, match="duplicate_id"):
    read(skip_duplicate_ids=True, strict=True)
  # Ids of other types are compared as written.
  ids = records.UniqueIds("f", hint="")
  ids.check(["x"], "line 1")
  with pytest.raises(records.DuplicateIdError, match=r"\['x'\].*unique$"):
    ids.check(["x"], "line 2")
  assert issubclass(records.DuplicateIdError, UserInputError)


def test_load_json_unique_keys_refuses_a_repeated_key(tmp_path):
  path = tmp_path / "predictions.json"
  path.write_text('{"q1": "a", "q2": "b", "q1": "c"}')
  assert records.load_json(str(path)) == {"q1": "c", "q2": "b"}
  with pytest.raises(records.DuplicateIdError,
                     match=r"predictions.json: key 'q1' is duplicated: "
                     r"entries #0 and #2"):
    records.load_json(str(path), unique_keys=True)


def test_reports_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
  path = tmp_path / "metrics.json"
  records.write_json(str(path), {"f1": 0.5})
  regular = tmp_path / "somefile"
  regular.write_text("x")
  with pytest.raises(records.OutputFileError,
                     match=f"{regular}/m.json: cannot write output"):
    records.write_json(str(regular / "m.json"), {"f1": 1.0})

  class FullDisk(tf.io.gfile.GFile):
    def write(self, data):
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  monkeypatch.setattr(tf.io.gfile, "GFile", FullDisk)
  with pytest.raises(records.OutputFileError,
                     match=f"{path}: cannot write output: No space left"):
    records.write_json(str(path), {"f1": 1.0})
  monkeypatch.undo()
  # The earlier file is whole, and no temporary file is left.
  assert json.loads(path.read_text()) == {"f1": 0.5}
  assert sorted(os.listdir(tmp_path)) == ["metrics.json", "somefile"]
