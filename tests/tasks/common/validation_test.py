"""Tests for tasks.common.validation: RecordChecker names the file and the
record once, each check its field."""

import pytest

from tasks.common import records
from tasks.common import validation


@pytest.fixture
def c():
  return validation.RecordChecker("f.json", "r7")


def _reason_and_detail(check):
  with pytest.raises(records.BadRecordError) as e:
    check()
  assert e.value.file == "f.json" and e.value.record_id == "r7"
  return e.value.field, e.value.reason, e.value.detail


def test_error_names_file_record_and_field(c):
  error = c.error("answer", "some_reason", "why")
  assert isinstance(error, records.BadRecordError)
  assert str(error) == ("f.json: record 'r7', field 'answer': some_reason "
                        "(why)")


def test_missing_fields(c):
  raw = {"a": 1, "b": None}
  assert c.get(raw, "a") == 1 and c.get(raw, "b") is None
  c.require(raw, ("a", "b"))
  assert _reason_and_detail(lambda: c.require(raw, ("a", "x", "y"))) == (
      "x", records.MISSING_FIELD, "")
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
  assert (reason, got) == (records.WRONG_TYPE, detail)
  if method == "json_object":
    assert field == "x"
    assert _reason_and_detail(lambda: c.json_object(5))[0] == "<record>"
  assert _reason_and_detail(
      lambda: c.typed(bad, "x", type(good), "a thing"))[2].startswith(
          "expected a thing, got ")


def test_text_and_text_lists(c):
  assert c.text("q", "query") == "q"
  assert c.text(" ", "query", allow_empty=True) == " "
  for value, reason in ((3, records.WRONG_TYPE), (" ", records.EMPTY_TEXT),
                        ("bad \udcff", records.UNDECODABLE_TEXT)):
    assert _reason_and_detail(lambda v=value: c.text(v, "query"))[:2] == (
        "query", reason)
  assert c.text_list(["a", ""], "supports", "empty_supports",
                     allow_empty_items=True) == ["a", ""]
  assert _reason_and_detail(
      lambda: c.text_list("a", "supports", "empty_supports")) == (
          "supports", records.WRONG_TYPE,
          "expected a list of strings, got str")
  assert _reason_and_detail(
      lambda: c.text_list([], "supports", "empty_supports"))[1] == (
          "empty_supports")
  assert _reason_and_detail(
      lambda: c.text_list(["a", " "], "supports", "empty_supports"))[:2] == (
          "supports[1]", records.EMPTY_TEXT)


def test_decode(c):
  assert c.decode("naïve".encode(), "text") == "naïve"
  assert _reason_and_detail(lambda: c.decode(b"ab\xff", "text")) == (
      "text", records.UNDECODABLE_TEXT, "not UTF-8 at byte 2")
