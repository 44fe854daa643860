"""Tests for tasks.openkp.data: whole-word keyphrases, validation, the
bad-record policy, de-duplication."""

import json

import pytest

from openkp_testing import make_record
from openkp_testing import vdom_features
from openkp_testing import write_jsonl
from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.openkp import data

GOOD = make_record("http://good", [["Machine", "Learning"], ["is", "fun"]],
                   [["machine", "learning"]])


def _with_vdom(record, mutate):
  vdom = json.loads(record["VDOM"])
  mutate(vdom)
  return dict(record, VDOM=json.dumps(vdom))


def _bad_records():
  """(json line or record, reason, field) for each kind of bad record."""
  no_kp = dict(GOOD, url="u-no-kp")
  del no_kp["KeyPhrases"]

  def set_(i, key, value):
    def mutate(vdom):
      vdom[i][key] = value
    return mutate

  return [
      ("{not json", data.NOT_JSON, "<record>"),
      (no_kp, input_errors.MISSING_FIELD, "KeyPhrases"),
      (dict(GOOD, url="u-vdom-str", VDOM="[{oops"), data.INVALID_VDOM, "VDOM"),
      (dict(GOOD, url="u-vdom-empty", VDOM="[]"), data.INVALID_VDOM, "VDOM"),
      (_with_vdom(dict(GOOD, url="u-gap"),
                  set_(1, "start_idx",
                       3)), data.VDOM_NOT_CONTIGUOUS, "VDOM[1].start_idx"),
      (_with_vdom(dict(GOOD, url="u-short"),
                  set_(1, "end_idx",
                       3)), data.VDOM_NOT_CONTIGUOUS, "VDOM[1].start_idx"),
      (_with_vdom(dict(GOOD, url="u-text"),
                  set_(0, "text",
                       "Machine")), data.VDOM_TEXT_MISMATCH, "VDOM[0].text"),
      (_with_vdom(dict(GOOD, url="u-feat"), set_(0, "feature", [1.0] * 19)),
       data.INVALID_VDOM_FEATURE, "VDOM[0].feature"),
      (_with_vdom(
          dict(GOOD, url="u-ind"), set_(1, "feature", vdom_features(bold=0.5))),
       data.INVALID_VDOM_FEATURE, "VDOM[1].feature"),
      (dict(GOOD, url="u-nokp",
            KeyPhrases=[["machine", "learn"],
                        ["xyz"]]), data.NO_VALID_KEYPHRASE, "KeyPhrases"),
      (dict(GOOD, url="u-kptype",
            KeyPhrases=[["ok", 3]]), input_errors.WRONG_TYPE, "KeyPhrases[0]"),
      (dict(GOOD, url="u-empty", text=" "), input_errors.EMPTY_TEXT, "text"),
      # Python's json writes (and reads) NaN and Infinity.
      (_with_vdom(
          dict(GOOD, url="u-nan"),
          set_(0, "feature", vdom_features(y=float("nan")))),
       data.INVALID_VDOM_FEATURE, "VDOM[0].feature"),
      (_with_vdom(
          dict(GOOD, url="u-inf"),
          set_(1, "feature", vdom_features(width=float("-inf")))),
       data.INVALID_VDOM_FEATURE, "VDOM[1].feature"),
  ]


def test_whole_word_matching_is_case_insensitive_and_bounded():
  text = "deep machine learning, for machine-learning people".lower()
  assert data.occurs_as_whole_words(text, "Machine Learning,")
  assert data.occurs_as_whole_words(text, "deep")
  assert data.occurs_as_whole_words(text, "people")
  assert not data.occurs_as_whole_words(text, "machine learning")  # comma
  assert not data.occurs_as_whole_words(text, "learn")
  assert data.occurs_as_whole_words(text, "for machine-learning")
  assert not data.occurs_as_whole_words(text, "")
  assert data.join_keyphrase([" Machine ", "", "learning"]) == (
      "Machine learning")


def test_valid_record_keeps_at_most_three_keyphrases():
  rec = make_record("u", [["a", "b", "c", "d"]],
                    [["A"], ["b"], ["zz"], ["c"], ["d"]])
  record, num_valid = data.validate_record(rec, "f", 0, labeled=True)
  assert num_valid == 4
  assert record.keyphrases == ("A", "b", "c")
  assert record.num_keyphrases_dropped == 2  # "zz" invalid, "d" over 3
  assert record.words == ["a", "b", "c", "d"]
  assert record.element_starts == [0]
  assert json.loads(json.dumps(record.to_json()))["KeyPhrases"] == [
      ["A"], ["b"], ["c"]]


def test_keyphrase_positions_first_occurrence_inside_one_element():
  rec = make_record("u", [["x", "Deep"], ["learning", "y"],
                          ["deep", "learning", "deep"]],
                    [["deep", "learning"], ["Deep"], ["y"]])
  record, _ = data.validate_record(rec, "f", 0, labeled=True)
  # "deep learning" straddles elements 0/1 first; its first occurrence
  # inside one element is at word 4. The original's order: by the element
  # that holds the phrase ("deep" 0, "y" 1, "deep learning" 2), not by the
  # phrase.
  assert data.keyphrase_positions(record) == [(1, 1), (3, 1), (4, 2)]
  # Within one element, by the sorted phrase, not by position: "c" at word
  # 0 comes last.
  rec = make_record("u", [["c", "a", "b"]], [["c"], ["a", "b"], ["a"]])
  record, _ = data.validate_record(rec, "f", 0, labeled=True)
  assert data.keyphrase_positions(record) == [(1, 1), (1, 2), (0, 1)]


def test_bad_records_are_skipped_counted_and_named(tmp_path):
  bad = _bad_records()
  lines = [GOOD] + [r for r, _, _ in bad]
  # A line with bytes that are not UTF-8 (a record of its own).
  raw = "\n".join(l if isinstance(l, str) else json.dumps(l) for l in lines)
  bytes_line = json.dumps(dict(GOOD, url="u-bytes")).replace(
      '"text": "Machine', '"text": "Mach\\u00ffine').encode("utf-8")
  bytes_line = bytes_line.replace(b"\\u00ff", b"\xff")
  raw = raw.encode("utf-8") + b"\n" + bytes_line + b"\n"
  path = tmp_path / "OpenKPDev.jsonl"
  path.write_bytes(raw)
  stats = record_stats.RecordStats(input_file=str(path))
  kept = data.read_records(str(path), stats=stats)
  assert [r.url for r in kept] == ["http://good"]
  assert stats.examples_read == len(lines) + 1
  named = {(s["reason"], s["field"]) for s in stats.skipped_records}
  for _, reason, field in bad:
    assert (reason, field) in named, (reason, field)
  assert (input_errors.UNDECODABLE_TEXT, "text") in named
  assert stats.num_skipped == len(bad) + 1
  by_id = {s["id"]: s for s in stats.skipped_records}
  assert by_id["line 2"]["reason"] == data.NOT_JSON  # named by line
  assert by_id["u-gap"]["file"] == str(path)


def test_strict_fails_on_first_bad_record(tmp_path):
  path = write_jsonl(str(tmp_path / "OpenKPTrain.jsonl"),
                     [GOOD, _bad_records()[4][0]])
  with pytest.raises(input_errors.BadRecordError, match="u-gap.*VDOM\\[1\\]"):
    data.read_records(path, strict=True)


def test_unusable_files(tmp_path):
  with pytest.raises(input_errors.InputFileError, match="cannot read"):
    data.read_records(str(tmp_path / "missing.jsonl"))
  (tmp_path / "empty.jsonl").write_text("\n \n")
  with pytest.raises(input_errors.InputFileError, match="empty"):
    data.read_records(str(tmp_path / "empty.jsonl"))


def test_duplicate_urls_keep_most_valid_keyphrases_or_first(tmp_path):
  one = make_record("http://dup", [["a", "b"]], [["a"], ["zz"]])
  two = make_record("http://dup", [["a", "b"]], [["a"], ["b"]])
  three = make_record("http://dup", [["a", "b"]], [["b"], ["a"]])
  stats = record_stats.RecordStats()
  kept = data.read_records(write_jsonl(str(tmp_path / "OpenKPDev.jsonl"),
                                       [one, two, three, GOOD]), stats=stats)
  assert [(r.url, r.line) for r in kept] == [("http://dup", 1),
                                            ("http://good", 3)]
  assert stats.skipped == {data.DUPLICATE_URL: 2}
  # Unlabelled (EvalPublic) files: the first one wins, no KeyPhrases needed.
  unlabeled = [dict(r) for r in (one, two)]
  for r in unlabeled:
    del r["KeyPhrases"]
  kept = data.read_records(write_jsonl(
      str(tmp_path / "OpenKPEvalPublic.jsonl"), unlabeled))
  assert [(r.line, r.keyphrases) for r in kept] == [(0, None)]
