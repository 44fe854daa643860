"""Tests for tasks.wikihop.data and the preprocess binary: bad records,
strict mode, unusable files, stats JSON."""

import json
import os
import subprocess
import sys

import pytest

from tasks.common import records
from tasks.wikihop import data
from tasks.wikihop import features as F
from tasks.wikihop import preprocess
from tests.test_common_tokenization import write_test_vocab

GOOD = dict(id="g0", query="country_of x", candidates=["A", "b"], answer="b ",
            supports=["x is in b."])


def _bad_records():
  """(record, expected reason, expected field) for each kind of bad record."""
  no_answer = dict(GOOD, id="m0")
  del no_answer["answer"]
  return [
      (no_answer, data.MISSING_FIELD, "answer"),
      (dict(GOOD, id="w0", candidates="a"), data.WRONG_TYPE, "candidates"),
      (dict(GOOD, id="w1", supports=["ok", 3]), data.WRONG_TYPE,
       "supports[1]"),
      (["not", "a", "record"], data.WRONG_TYPE, "<record>"),
      (dict(GOOD, id="a0", answer="c"), data.ANSWER_NOT_IN_CANDIDATES,
       "answer"),
      (dict(GOOD, id="e0", supports=[]), data.EMPTY_SUPPORTS, "supports"),
      (dict(GOOD, id="e1", candidates=[]), data.EMPTY_CANDIDATES,
       "candidates"),
      (dict(GOOD, id="e2", query="  "), data.EMPTY_TEXT, "query"),
  ]


def _write(path, recs, undecodable_id=None):
  text = json.dumps(recs)
  raw = text.encode("utf-8")
  if undecodable_id:
    # A record whose query holds a byte that is not UTF-8.
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


def test_bad_records_are_skipped_counted_and_named(tmp_path):
  recs = [GOOD] + [r for r, _, _ in _bad_records()] + [
      dict(GOOD, id="u0")]
  path = _write(tmp_path / "dev.json", recs, undecodable_id="u0")
  stats = records.RecordStats(input_file=path)
  good = list(data.read_records(path, stats=stats))
  assert [r.id for r in good] == ["g0"]
  assert stats.examples_read == len(recs)
  expected = [(r.get("id", "#4") if isinstance(r, dict) else "#4", reason,
               field) for r, reason, field in _bad_records()]
  expected.append(("u0", data.UNDECODABLE_TEXT, "query"))
  got = [(s["id"], s["reason"], s["field"]) for s in stats.skipped_records]
  assert got == expected
  assert all(s["file"] == path for s in stats.skipped_records)
  assert stats.skipped[data.WRONG_TYPE] == 3
  assert stats.num_skipped == len(recs) - 1


@pytest.mark.parametrize("index", range(len(_bad_records())))
def test_strict_mode_names_file_record_and_field(tmp_path, index):
  record, reason, field = _bad_records()[index]
  path = _write(tmp_path / "train.json", [GOOD, record])
  with pytest.raises(records.BadRecordError) as e:
    list(data.read_records(path, strict=True))
  assert str(tmp_path / "train.json") in str(e.value)
  assert f"field {field!r}" in str(e.value)
  assert reason in str(e.value)
  rid = record.get("id", "#1") if isinstance(record, dict) else "#1"
  assert f"record {rid!r}" in str(e.value)


def test_empty_and_unreadable_files_are_clear_errors(tmp_path):
  (tmp_path / "empty.json").write_text("")
  with pytest.raises(records.InputFileError, match="empty.json.*empty"):
    list(data.read_records(str(tmp_path / "empty.json")))
  (tmp_path / "none.json").write_text("[]")
  with pytest.raises(records.InputFileError, match="none.json.*no records"):
    list(data.read_records(str(tmp_path / "none.json")))
  with pytest.raises(records.InputFileError, match="nope.json"):
    list(data.read_records(str(tmp_path / "nope.json")))


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return write_test_vocab(tmp_path_factory.mktemp("v") / "vocab.txt",
                          ["a", "b", "x", "is", "in", "country", "of"])


def test_preprocess_writes_records_and_stats(tmp_path, vocab):
  long_doc = " ".join(["x is in b."] * 6)
  recs = [GOOD, dict(GOOD, id="t0", supports=[long_doc, "a is in x."]),
          dict(GOOD, id="a0", answer="zz"),
          dict(GOOD, id="o0", candidates=["a"] * 9, answer="a")]
  path = _write(tmp_path / "dev.json", recs)
  featurizer = preprocess.make_featurizer(vocab, None, long_seq_len=24,
                                          global_seq_len=8)
  stats = preprocess.preprocess_file(path, str(tmp_path / "out"), featurizer)
  record_path, stats_path = preprocess.output_paths(path,
                                                    str(tmp_path / "out"))
  assert record_path.endswith("dev.tfrecord")
  written = json.load(open(stats_path))
  assert written["examples_read"] == 4
  assert written["examples_written"] == 2
  assert written["examples_truncated"] == 1
  assert written["truncation"]["sentences_dropped"] > 0
  assert written["skipped"] == {data.ANSWER_NOT_IN_CANDIDATES: 1,
                                data.TOO_LONG: 1}
  assert [(s["id"], s["field"]) for s in written["skipped_records"]] == [
      ("a0", "answer"), ("o0", "candidates")]
  ids = [f["example_id"] for f in F.make_dataset(
      record_path, 24, 8).as_numpy_iterator()]
  assert ids == [b"g0", b"t0"]
  with pytest.raises(records.BadRecordError, match="'o0'.*too_long"):
    preprocess.preprocess_file(
        _write(tmp_path / "o.json", [GOOD, recs[3]]), str(tmp_path / "o"),
        featurizer, strict=True)
  assert not os.path.exists(tmp_path / "o" / "o.tfrecord")


def test_preprocess_cli_strict_fails_naming_the_record(tmp_path, vocab):
  path = _write(tmp_path / "dev.json", [GOOD, dict(GOOD, id="bad7",
                                                   answer="zz")])
  cmd = [sys.executable, "-m", "tasks.wikihop.preprocess", f"--input={path}",
         f"--vocab={vocab}", f"--output_dir={tmp_path / 'out'}",
         "--long_seq_len=32", "--global_seq_len=16"]
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, PYTHONPATH=root, CUDA_VISIBLE_DEVICES="")
  bad = subprocess.run(cmd + ["--strict"], cwd=root, env=env,
                       capture_output=True, text=True, timeout=120)
  assert bad.returncode != 0
  assert (f"{path}: record 'bad7', field 'answer': answer_not_in_candidates"
          in bad.stderr)
