"""Tests for tasks.common.inputs.record_stats: the bad-record policy (skip
and count, or strict) and the stats JSON."""

import json

import pytest

from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats


def test_stats_skip_and_strict():
  error = input_errors.BadRecordError("f.json", "r1", "answer", "some_reason",
                                      "why")
  assert str(error) == ("f.json: record 'r1', field 'answer': some_reason "
                        "(why)")
  stats = record_stats.RecordStats(input_file="f.json")
  stats.handle_bad_record(error)
  stats.add_truncation({"a": 0})
  stats.add_truncation({"a": 3})
  d = stats.to_dict()
  assert d["skipped"] == {"some_reason": 1}
  assert d["skipped_records"] == [dict(file="f.json", id="r1", field="answer",
                                       reason="some_reason", detail="why")]
  assert d["examples_truncated"] == 1 and d["truncation"] == {"a": 3}
  json.dumps(d)
  with pytest.raises(input_errors.BadRecordError, match="record 'r1'"):
    record_stats.RecordStats(strict=True).handle_bad_record(error)
