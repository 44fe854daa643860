"""Tests for tasks.common.inputs.record_checks: a record's field checks
(`RecordChecker`), text checks and unique ids."""

import json

import pytest

from etc_realformer.errors import UserInputError
from tasks.common.inputs import input_errors
from tasks.common.inputs import json_files
from tasks.common.inputs import record_checks
from tasks.common.inputs import record_stats


@pytest.mark.parametrize("value, allow_empty, reason", [
    (3, False, input_errors.WRONG_TYPE),
    ("bad \udcff", False, input_errors.UNDECODABLE_TEXT),
    ("  ", False, input_errors.EMPTY_TEXT),
])
def test_check_text_names_record_and_field(value, allow_empty, reason):
  with pytest.raises(input_errors.BadRecordError) as e:
    record_checks.check_text(value, "f.json", "r7", "query", allow_empty)
  assert e.value.reason == reason
  assert str(e.value).startswith("f.json: record 'r7', field 'query': ")
  assert record_checks.check_text("  ", "f.json", "r7", "q", True) == "  "


def test_unique_ids_refuse_a_repeat_or_skip_and_count_it(tmp_path):
  path = tmp_path / "dev.json"
  path.write_text(json.dumps([{"id": "a", "v": 1}, {"id": "b", "v": 2},
                              {"id": "a", "v": 3}]))

  def validate(raw, file, index):
    del file, index  # Unused.
    return raw

  def read(**kwargs):
    stats = record_stats.RecordStats(input_file=str(path), **kwargs)
    kept = list(json_files.read_json_records(str(path), validate, stats,
                                             id_of=lambda r: r["id"]))
    return kept, stats

  with pytest.raises(input_errors.DuplicateIdError,
                     match=r"dev.json: id 'a' is duplicated: record #0 and "
                     r"record #2; .*--skip_duplicate_ids"):
    read()
  kept, stats = read(skip_duplicate_ids=True)
  assert [r["v"] for r in kept] == [1, 2]  # The first one is kept.
  assert stats.skipped == {input_errors.DUPLICATE_ID: 1}
  assert stats.skipped_records == [dict(
      file=str(path), id="a", field="id", reason=input_errors.DUPLICATE_ID,
      detail="record #2 repeats record #0")]
  assert "skip_duplicate_ids" not in stats.to_dict()  # A setting.
  # Under strict, the skip is a failure like any bad record.
  with pytest.raises(input_errors.BadRecordError, match="duplicate_id"):
    read(skip_duplicate_ids=True, strict=True)
  # Ids of other types are compared as written.
  ids = record_checks.UniqueIds("f", hint="")
  ids.check(["x"], "line 1")
  with pytest.raises(input_errors.DuplicateIdError, match=r"\['x'\].*unique$"):
    ids.check(["x"], "line 2")
  assert issubclass(input_errors.DuplicateIdError, UserInputError)


@pytest.fixture
def c():
  return record_checks.RecordChecker("f.json", "r7")


def _reason_and_detail(check):
  with pytest.raises(input_errors.BadRecordError) as e:
    check()
  assert e.value.file == "f.json" and e.value.record_id == "r7"
  return e.value.field, e.value.reason, e.value.detail


def test_error_names_file_record_and_field(c):
  error = c.error("answer", "some_reason", "why")
  assert isinstance(error, input_errors.BadRecordError)
  assert str(error) == ("f.json: record 'r7', field 'answer': some_reason "
                        "(why)")


def test_missing_fields(c):
  raw = {"a": 1, "b": None}
  assert c.get(raw, "a") == 1 and c.get(raw, "b") is None
  c.require(raw, ("a", "b"))
  assert _reason_and_detail(lambda: c.require(raw, ("a", "x", "y"))) == (
      "x", input_errors.MISSING_FIELD, "")
  assert _reason_and_detail(lambda: c.get(raw, "x", "outer.x"))[0] == (
      "outer.x")


@pytest.mark.parametrize("method, good, bad, detail", [
    ("int_", 3, True, "expected an integer, got bool"),
    ("int_", -1, 2.0, "expected an integer, got float"),
    ("bool_", False, 0, "expected true/false, got int"),
    ("list_", [], (), "expected a list, got tuple"),
    ("dict_", {}, [], "expected an object, got list"),
    ("json_object", {"k": 1}, "s", "expected a JSON object, got str"),
])
def test_types(c, method, good, bad, detail):
  assert getattr(c, method)(good, "x") == good
  field, reason, got = _reason_and_detail(lambda: getattr(c, method)(bad, "x"))
  assert (reason, got) == (input_errors.WRONG_TYPE, detail)
  if method == "json_object":
    assert field == "x"
    assert _reason_and_detail(lambda: c.json_object(5))[0] == "<record>"
  assert _reason_and_detail(
      lambda: c.typed(bad, "x", type(good), "a thing"))[2].startswith(
          "expected a thing, got ")


def test_text_and_text_lists(c):
  assert c.text("q", "query") == "q"
  assert c.text(" ", "query", allow_empty=True) == " "
  for value, reason in ((3, input_errors.WRONG_TYPE), (" ",
                                                       input_errors.EMPTY_TEXT),
                        ("bad \udcff", input_errors.UNDECODABLE_TEXT)):
    assert _reason_and_detail(lambda v=value: c.text(v, "query"))[:2] == (
        "query", reason)
  assert c.text_list(["a", ""], "supports", "empty_supports",
                     allow_empty_items=True) == ["a", ""]
  assert _reason_and_detail(
      lambda: c.text_list("a", "supports", "empty_supports")) == (
          "supports", input_errors.WRONG_TYPE,
          "expected a list of strings, got str")
  assert _reason_and_detail(
      lambda: c.text_list([], "supports", "empty_supports"))[1] == (
          "empty_supports")
  assert _reason_and_detail(
      lambda: c.text_list(["a", " "], "supports", "empty_supports"))[:2] == (
          "supports[1]", input_errors.EMPTY_TEXT)


def test_decode(c):
  assert c.decode("naïve".encode(), "text") == "naïve"
  assert _reason_and_detail(lambda: c.decode(b"ab\xff", "text")) == (
      "text", input_errors.UNDECODABLE_TEXT, "not UTF-8 at byte 2")
