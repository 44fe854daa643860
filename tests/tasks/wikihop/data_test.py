"""Tests for tasks.wikihop.data: validation, bad records, strict mode and
unusable files."""

import json

import pytest

from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.wikihop import data

GOOD = dict(id="g0", query="country_of x", candidates=["A", "b"], answer="b ",
            supports=["x is in b."])


def bad_records():
  """(record, expected reason, expected field) for each kind of bad record."""
  no_answer = dict(GOOD, id="m0")
  del no_answer["answer"]
  return [
      (no_answer, input_errors.MISSING_FIELD, "answer"),
      (dict(GOOD, id="w0",
            candidates="a"), input_errors.WRONG_TYPE, "candidates"),
      (dict(GOOD, id="w1",
            supports=["ok", 3]), input_errors.WRONG_TYPE, "supports[1]"),
      (["not", "a", "record"], input_errors.WRONG_TYPE, "<record>"),
      (dict(GOOD, id="a0",
            answer="c"), data.ANSWER_NOT_IN_CANDIDATES, "answer"),
      (dict(GOOD, id="e0", supports=[]), data.EMPTY_SUPPORTS, "supports"),
      (dict(GOOD, id="e1", candidates=[]), data.EMPTY_CANDIDATES, "candidates"),
      (dict(GOOD, id="e2", query="  "), input_errors.EMPTY_TEXT, "query"),
  ]


def write(path, recs, undecodable_id=None):
  """Writes records as a JSON array; `undecodable_id`'s query gets a byte
  that is not UTF-8."""
  raw = json.dumps(recs).encode("utf-8")
  if undecodable_id:
    raw = raw.replace(f'"id": "{undecodable_id}", "query": "country_of x"'
                      .encode(), f'"id": "{undecodable_id}", "query": "c\xff"'
                      .encode("latin-1"))
    assert b"\xff" in raw
  path.write_bytes(raw)
  return str(path)


def test_validate_normalizes_candidates_and_answer():
  r = data.validate_record(GOOD, "f.json", 0)
  assert r.candidates == ["a", "b"] and r.answer == "b"
  assert r.answer_index == 1 and r.id == "g0"
  assert r.to_json() == dict(GOOD, candidates=["a", "b"], answer="b")


def test_bad_records_are_skipped_counted_and_named(tmp_path):
  recs = [GOOD] + [r for r, _, _ in bad_records()] + [dict(GOOD, id="u0")]
  path = write(tmp_path / "dev.json", recs, undecodable_id="u0")
  stats = record_stats.RecordStats(input_file=path)
  good = list(data.read_records(path, stats=stats))
  assert [r.id for r in good] == ["g0"]
  assert stats.examples_read == len(recs)
  expected = [(r.get("id", "#4") if isinstance(r, dict) else "#4", reason,
               field) for r, reason, field in bad_records()]
  expected.append(("u0", input_errors.UNDECODABLE_TEXT, "query"))
  got = [(s["id"], s["reason"], s["field"]) for s in stats.skipped_records]
  assert got == expected
  assert all(s["file"] == path for s in stats.skipped_records)
  assert stats.skipped[input_errors.WRONG_TYPE] == 3
  assert stats.num_skipped == len(recs) - 1


@pytest.mark.parametrize("index", range(len(bad_records())))
def test_strict_mode_names_file_record_and_field(tmp_path, index):
  record, reason, field = bad_records()[index]
  path = write(tmp_path / "train.json", [GOOD, record])
  with pytest.raises(input_errors.BadRecordError) as e:
    list(data.read_records(path, strict=True))
  assert str(tmp_path / "train.json") in str(e.value)
  assert f"field {field!r}" in str(e.value)
  assert reason in str(e.value)
  rid = record.get("id", "#1") if isinstance(record, dict) else "#1"
  assert f"record {rid!r}" in str(e.value)


def test_empty_and_unreadable_files_are_clear_errors(tmp_path):
  (tmp_path / "empty.json").write_text("")
  with pytest.raises(input_errors.InputFileError, match="empty.json.*empty"):
    list(data.read_records(str(tmp_path / "empty.json")))
  (tmp_path / "none.json").write_text("[]")
  with pytest.raises(
      input_errors.InputFileError, match="none.json.*no records"):
    list(data.read_records(str(tmp_path / "none.json")))
  with pytest.raises(input_errors.InputFileError, match="nope.json"):
    list(data.read_records(str(tmp_path / "nope.json")))
