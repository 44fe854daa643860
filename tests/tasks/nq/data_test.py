"""Tests for tasks.nq.data: both formats, streaming, the bad-record policy,
the example-level labels."""

import copy
import gzip
import json

import pytest

from etc_realformer.errors import UserInputError
from tasks.common import output_files
from tasks.common.inputs import input_errors
from tasks.common.inputs import input_files
from tasks.common.inputs import record_stats
from tasks.nq import data


def full_record(example_id=7, **overrides):
  """A small full-format record: <H1> t </H1> <P> a b c </P> <Ul> <Li> d
  </Li> </Ul> with a nested candidate and byte offsets."""
  words = ["<H1>", "t", "</H1>", "<P>", "a", "b", "c", "</P>", "<Ul>", "<Li>",
           "d", "</Li>", "</Ul>"]
  tokens, at = [], 0
  for w in words:
    tokens.append(dict(token=w, start_byte=at, end_byte=at + len(w),
                       html_token=w.startswith("<")))
    at += len(w) + 1
  record = {
      "example_id": example_id,
      "question_text": "what is b",
      "document_url": "http://x",
      "document_html": " ".join(words),
      "document_tokens": tokens,
      "long_answer_candidates": [
          dict(start_token=3, end_token=8, start_byte=6, end_byte=19,
               top_level=True),
          dict(start_token=8, end_token=13, start_byte=20, end_byte=40,
               top_level=True),
          dict(start_token=9, end_token=12, start_byte=25, end_byte=35,
               top_level=False)],
      "annotations": [dict(
          annotation_id=1,
          long_answer=dict(start_token=3, end_token=8, start_byte=6,
                           end_byte=19, candidate_index=0),
          short_answers=[dict(start_token=5, end_token=6, start_byte=12,
                              end_byte=13)],
          yes_no_answer="NONE")],
  }
  record.update(overrides)
  return record


def simplified_record(example_id=8):
  return {
      "example_id": example_id,
      "question_text": "what is b",
      "document_url": "http://x",
      "document_text": '<P> a b c </P> <Table> <Tr> <Td_colspan="2"> d </Td> '
                       "</Tr> </Table>",
      "long_answer_candidates": [
          dict(start_token=0, end_token=5, top_level=True),
          dict(start_token=5, end_token=12, top_level=True),
          dict(start_token=6, end_token=11, top_level=False)],
      "annotations": [dict(
          long_answer=dict(start_token=0, end_token=5, candidate_index=0),
          short_answers=[], yes_no_answer="YES")],
  }


def write_lines(path, lines, gz=True):
  payload = "".join((l if isinstance(l, str) else json.dumps(l)) + "\n"
                    for l in lines).encode("utf-8")
  if gz:
    payload = gzip.compress(payload)
  path.write_bytes(payload)
  return str(path)


def test_full_format_gz(tmp_path):
  path = write_lines(tmp_path / "nq-dev-00.jsonl.gz",
                     [full_record(7), full_record(-9)])
  got = list(data.read_records(path))
  assert [r.example_id for r in got] == [7, -9]
  r = got[0]
  assert r.format == data.FULL and r.question == "what is b"
  assert r.num_tokens == 13 and r.tokens[3] == "<P>"
  assert r.token_is_html[3] and not r.token_is_html[4]
  assert r.token_start_byte[4] == 17 and r.token_end_byte[4] == 18
  assert [c.top_level for c in r.candidates] == [True, True, False]
  assert r.candidates[0].span == data.Span(3, 8, 6, 19)
  a = r.annotations[0]
  assert a.candidate_index == 0 and a.yes_no_answer == "NONE"
  assert a.short_answers[0].start_token == 5
  labels = data.labels_of(r)
  assert labels == data.Labels(data.SHORT, (3, 8), (5, 6))
  back = data.record_to_json(r)
  assert back["document_tokens"] == full_record()["document_tokens"]


def test_simplified_plain_jsonl(tmp_path):
  path = write_lines(tmp_path / "simplified-nq-train.jsonl",
                     [simplified_record()], gz=False)
  (r,) = list(data.read_records(path))
  assert r.format == data.SIMPLIFIED
  assert r.tokens[7] == '<Td_colspan="2">' and r.token_is_html[7]
  assert [t for t, h in zip(r.tokens, r.token_is_html) if not h] == [
      "a", "b", "c", "d"]
  assert set(r.token_start_byte) == {-1}
  assert r.candidates[0].span == data.Span(0, 5, -1, -1)
  assert data.labels_of(r).answer_type == data.YES


@pytest.mark.parametrize("annotation,expected", [
    (dict(long_answer=dict(start_token=-1, end_token=-1, candidate_index=-1),
          short_answers=[], yes_no_answer="NONE"),
     data.Labels(data.NULL, (-1, -1), (-1, -1))),
    (dict(long_answer=dict(start_token=3, end_token=8, candidate_index=0),
          short_answers=[], yes_no_answer="NONE"),
     data.Labels(data.LONG, (3, 8), (-1, -1))),
    (dict(long_answer=dict(start_token=3, end_token=8, candidate_index=0),
          short_answers=[], yes_no_answer="NO"),
     data.Labels(data.NO, (3, 8), (-1, -1))),
    # Several short spans are merged, first start to last end.
    (dict(long_answer=dict(start_token=3, end_token=8, candidate_index=0),
          short_answers=[dict(start_token=4, end_token=5),
                         dict(start_token=6, end_token=7)],
          yes_no_answer="NONE"),
     data.Labels(data.SHORT, (3, 8), (4, 7))),
])
def test_labels_of_first_annotation(tmp_path, annotation, expected):
  other = dict(long_answer=dict(start_token=8, end_token=13,
                                candidate_index=1),
               short_answers=[], yes_no_answer="YES")
  raw = full_record(annotations=[annotation, other])
  record = data.validate_record(raw, "f", 1)
  assert data.labels_of(record) == expected


def test_predict_la_when_no_sa_and_unlabelled():
  raw = full_record()
  raw["annotations"][0]["short_answers"] = []
  record = data.validate_record(raw, "f", 1)
  assert data.labels_of(record, predict_la_when_no_sa=True).short_span == (
      3, 8)
  unlabelled = data.validate_record(full_record(annotations=[]), "f", 1)
  assert not unlabelled.has_labels
  assert data.labels_of(unlabelled).answer_type == -1


def _bad_variants():
  out = {}
  r = full_record(101)
  del r["question_text"]
  out["missing_field"] = (r, "101", "question_text")
  r = full_record(102)
  r["document_tokens"][2]["html_token"] = "yes"
  out["wrong_type"] = (r, "102", "document_tokens[2].html_token")
  r = full_record(103)
  r["long_answer_candidates"][1]["end_token"] = 14
  out["span_out_of_range"] = (r, "103", "long_answer_candidates[1]")
  r = full_record(104)
  r["annotations"][0]["short_answers"][0]["start_token"] = 6
  out["short"] = (r, "104", "annotations[0].short_answers[0]")
  r = full_record(105, document_tokens=[])
  out["empty_document"] = (r, "105", "document_tokens")
  r = full_record(106)
  r["annotations"][0]["yes_no_answer"] = "MAYBE"
  out["bad_value"] = (r, "106", "annotations[0].yes_no_answer")
  r = full_record(107)
  r["annotations"][0]["long_answer"]["candidate_index"] = 3
  out["candidate_index"] = (r, "107", "annotations[0].long_answer."
                                      "candidate_index")
  r = full_record("x")
  out["id"] = (r, "line 10", "example_id")  # its line in the test file
  return out


@pytest.mark.parametrize("change,field,reason", [
    (lambda t: t.__setitem__(2, "<P>"), "document_tokens[2]",
     input_errors.WRONG_TYPE),
    (lambda t: t[3].pop("token"), "document_tokens[3].token",
     input_errors.MISSING_FIELD),
    (lambda t: t[4].__setitem__("token", 5), "document_tokens[4].token",
     input_errors.WRONG_TYPE),
    (lambda t: t[5].__setitem__("start_byte", True),
     "document_tokens[5].start_byte", input_errors.WRONG_TYPE),
    (lambda t: t[6].__setitem__("token", "b\udc80"),
     "document_tokens[6].token", input_errors.UNDECODABLE_TEXT)])
def test_token_checks_name_the_first_bad_item(change, field, reason):
  # Well-formed tokens are checked column by column; any bad one falls back
  # to the item-by-item checks, which name it.
  r = full_record(9)
  change(r["document_tokens"])
  with pytest.raises(input_errors.BadRecordError) as error:
    data.validate_record(r, "f.jsonl", 1)
  assert (error.value.field, error.value.reason) == (field, reason)


def test_column_checks_give_the_item_checks_record(monkeypatch):
  assert data._well_formed_tokens(full_record(9)["document_tokens"])
  fast = data.validate_record(full_record(9), "f.jsonl", 1)
  monkeypatch.setattr(data, "_well_formed_tokens", lambda items: None)
  assert data.validate_record(full_record(9), "f.jsonl", 1) == fast


def test_bad_lines_and_records_are_skipped_and_named(tmp_path):
  bad = _bad_variants()
  lines = [full_record(1)] + [v[0] for v in bad.values()]
  lines.insert(3, '{"example_id": 5, "question_text": ')  # not JSON
  lines += ["", full_record(1), full_record(2)]  # blank, duplicate, good
  path = write_lines(tmp_path / "nq-train-00.jsonl.gz", lines)
  # A repeated example_id is refused unless the policy skips and counts it.
  with pytest.raises(input_errors.DuplicateIdError,
                     match=r"example_id 1 is duplicated: line 1 and line "):
    list(data.read_records(path))
  stats = record_stats.RecordStats(input_file=path, skip_duplicate_ids=True)
  got = list(data.read_records(path, stats=stats))
  assert [r.example_id for r in got] == [1, 2]
  assert stats.examples_read == len(lines) - 1  # the blank line is no record
  skipped = {(s["id"], s["field"]): s["reason"]
             for s in stats.skipped_records}
  assert skipped[("line 4", "<line>")] == data.BAD_JSON
  assert skipped[("1", "example_id")] == data.DUPLICATE_ID
  for _, record_id, field in bad.values():
    assert (record_id, field) in skipped, (record_id, field, skipped)
  assert skipped[("105", "document_tokens")] == data.EMPTY_DOCUMENT
  assert skipped[("103", "long_answer_candidates[1]")] == (
      data.SPAN_OUT_OF_RANGE)
  assert all(s["file"] == path for s in stats.skipped_records)
  assert stats.num_skipped == len(bad) + 2


def test_strict_raises_on_first_bad_record(tmp_path):
  path = write_lines(tmp_path / "nq.jsonl.gz",
                     [full_record(1), "not json", full_record(2)])
  it = data.read_records(path, strict=True)
  assert next(it).example_id == 1
  with pytest.raises(input_errors.BadRecordError, match="line 2"):
    next(it)


def test_require_labels(tmp_path):
  path = write_lines(tmp_path / "nq.jsonl.gz",
                     [full_record(1, annotations=[]), full_record(2)])
  stats = record_stats.RecordStats()
  got = list(data.read_records(path, stats=stats, require_labels=True))
  assert [r.example_id for r in got] == [2]
  assert stats.skipped == {data.NO_ANNOTATIONS: 1}


def test_file_errors_name_the_file(tmp_path):
  empty_gz = tmp_path / "empty.jsonl.gz"
  empty_gz.write_bytes(gzip.compress(b"\n\n"))
  empty = tmp_path / "empty.jsonl"
  empty.write_bytes(b"")
  corrupt = tmp_path / "corrupt.jsonl.gz"
  corrupt.write_bytes(b"\x1f\x8b" + b"garbage" * 10)
  for path in (empty_gz, empty, corrupt, tmp_path / "missing.jsonl.gz"):
    with pytest.raises(input_errors.InputFileError, match=str(path.name)):
      list(data.read_records(str(path)))
  # The one pattern expansion's error: one line naming the pattern.
  with pytest.raises(UserInputError, match="no input file matches"):
    input_files.match_files(str(tmp_path / "nq-*-??.jsonl.gz"))


def test_streaming_truncated_gzip_yields_records_before_the_damage(tmp_path):
  payload = gzip.compress("".join(
      json.dumps(full_record(i)) + "\n" for i in range(50)).encode())
  path = tmp_path / "nq-train-01.jsonl.gz"
  path.write_bytes(payload[:len(payload) // 2])
  got = []
  with pytest.raises(input_errors.InputFileError, match="truncated"):
    for record in data.read_records(str(path)):
      got.append(record.example_id)
  assert got and got == list(range(len(got)))


def test_globs_of_files(tmp_path):
  write_lines(tmp_path / "nq-dev-01.jsonl.gz", [full_record(3)])
  write_lines(tmp_path / "nq-dev-00.jsonl.gz", [full_record(1),
                                                full_record(2)])
  pattern = str(tmp_path / "nq-dev-??.jsonl.gz")
  assert [r.example_id for r in data.read_all(pattern)] == [1, 2, 3]
  assert len(input_files.match_files(f"{pattern},{pattern}")) == 2


def test_write_jsonl_round_trip(tmp_path):
  record = data.validate_record(copy.deepcopy(full_record()), "f", 1)
  path = str(tmp_path / "out.jsonl.gz")
  output_files.write_jsonl(path, [data.record_to_json(record)])
  (again,) = list(data.read_records(path))
  assert again == record
