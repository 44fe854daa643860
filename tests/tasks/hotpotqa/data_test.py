"""Tests for tasks.hotpotqa.data: reading, bad records, strict mode and
unusable files."""

import json

import pytest

from hotpotqa_testing import released as good
from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.hotpotqa import data

BAD = {
    "missing_field": ({"_id": "m", "question": "q?"}, "context"),
    "wrong_type": (good(0, _id="w", context="text"), "context"),
    "empty_text": (good(0, _id="e", question="  "), "question"),
    "empty_context": (good(0, _id="c", context=[]), "context"),
    "undecodable_text": (None, "question"),  # written as raw bytes below
}


def _write(path, items, raw_tail=None):
  text = json.dumps(items)
  if raw_tail is not None:
    text = text[:-1] + ", " + raw_tail + "]"
  with open(path, "wb") as f:
    f.write(text.encode("utf-8", "surrogateescape"))
  return str(path)


def test_reader_skips_counts_and_names_bad_records(tmp_path):
  bad = [r for r, _ in BAD.values() if r is not None]
  undecodable = ('{"_id": "u", "question": "q\udcff?", "context": '
                 '[["T", ["s."]]]}')
  path = _write(tmp_path / "dev.json", [good(0)] + bad + [good(0)],
                raw_tail=undecodable)
  # A repeated _id is refused unless the policy skips and counts it.
  with pytest.raises(input_errors.DuplicateIdError,
                     match=r"dev.json: _id 'id0' is duplicated: record #0 "
                     r"and record #\d"):
    list(data.read_records(path))
  stats = record_stats.RecordStats(input_file=path, skip_duplicate_ids=True)
  kept = list(data.read_records(path, stats=stats))
  assert [r.id for r in kept] == ["id0"]
  assert stats.examples_read == 7
  assert stats.skipped == {**{k: 1 for k in BAD}, "duplicate_id": 1}
  named = {(s["id"], s["field"], s["reason"]) for s in stats.skipped_records}
  for reason, (record, field) in BAD.items():
    rid = record["_id"] if record else "u"
    assert (rid, field, reason) in named
  assert all(s["file"] == path for s in stats.skipped_records)
  record = kept[0]
  assert record.titles == ("Bob", "Ann")
  assert record.sentences[1] == ("Ann is x.", "Ann was born in Rome.")
  assert record.supporting_sentences() == {"Bob": [0], "Ann": [1]}
  assert record.to_json() == {k: v for k, v in good(0).items()
                              if k != "level"}


def test_strict_mode_and_unusable_files(tmp_path):
  path = _write(tmp_path / "dev.json", [good(0), BAD["wrong_type"][0]])
  with pytest.raises(input_errors.BadRecordError, match=r"'w'.*'context'"):
    list(data.read_records(path, strict=True))
  for content, message in (("", "empty"), ("{", "not valid JSON"),
                           ('{"a": 1}', "JSON array"), ("[]", "no records")):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(input_errors.InputFileError, match=message):
      list(data.read_records(str(p)))
  with pytest.raises(input_errors.InputFileError, match="cannot read"):
    list(data.read_records(str(tmp_path / "missing.json")))
  # Training files need labels; test-set style records are bad there.
  unlabelled = {k: v for k, v in good(1).items() if k != "answer"}
  p = _write(tmp_path / "train.json", [unlabelled])
  with pytest.raises(input_errors.BadRecordError, match="answer"):
    list(data.read_records(p, strict=True, require_labels=True))
  assert len(list(data.read_records(p))) == 1
