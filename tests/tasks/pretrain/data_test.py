"""Tests for tasks.pretrain.data: BERT's plain-text format (documents between
blank lines, globs, gzip) and bad input skipped, counted and named, or
failing with --strict."""

import gzip

import pytest

from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.pretrain import data


def _read(patterns, strict=False, **kwargs):
  stats = record_stats.RecordStats(input_file="x", strict=strict)
  return list(data.read_documents(patterns, stats, **kwargs)), stats


def test_documents_files_globs_and_gzip(tmp_path):
  (tmp_path / "a.txt").write_text("One.\nTwo.\n\n\nThree.\n  \nFour.\nFive.")
  with gzip.open(tmp_path / "b.txt.gz", "wt") as f:
    f.write("Six.\nSeven.\n")
  docs, stats = _read(f"{tmp_path}/*.txt,{tmp_path}/*.gz")
  assert [d.sentences for d in docs] == [["One.", "Two."], ["Three."],
                                         ["Four.", "Five."],
                                         ["Six.", "Seven."]]
  assert docs[0].doc_id.endswith("a.txt:1")
  assert docs[2].doc_id.endswith("a.txt:7")
  assert stats.examples_read == 10 and stats.num_skipped == 0
  with pytest.raises(FileNotFoundError, match="nothing.txt"):
    _read(str(tmp_path / "nothing.txt"))


def test_bad_input_is_skipped_counted_and_named(tmp_path):
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"Good one.\nbroken \xff\xfe bytes.\n" + b"x" * 100000 +
                  b"\nStill good.\n\nNext doc.\n")
  (tmp_path / "empty.txt").write_bytes(b"")
  (tmp_path / "blank.txt").write_text("\n \n")
  docs, stats = _read([str(bad), str(tmp_path / "empty.txt"),
                       str(tmp_path / "blank.txt")])
  assert [d.sentences for d in docs] == [["Good one.", "Still good."],
                                         ["Next doc."]]
  assert dict(stats.skipped) == {data.UNDECODABLE_TEXT: 1,
                                 data.LINE_TOO_LONG: 1, data.EMPTY_FILE: 2}
  named = [(r["file"].rsplit("/", 1)[1], r["id"], r["reason"])
           for r in stats.skipped_records]
  assert named == [("bad.txt", "line 2", data.UNDECODABLE_TEXT),
                   ("bad.txt", "line 3", data.LINE_TOO_LONG),
                   ("empty.txt", "line 1", data.EMPTY_FILE),
                   ("blank.txt", "line 1", data.EMPTY_FILE)]
  with pytest.raises(input_errors.BadRecordError,
                     match=r"bad.txt: record 'line 2'.*undecodable_text"):
    _read(str(bad), strict=True)
  docs, stats = _read(str(bad), max_line_chars=200000)
  assert dict(stats.skipped) == {data.UNDECODABLE_TEXT: 1}


def test_truncated_gzip_is_unreadable_from_there(tmp_path):
  path = tmp_path / "cut.txt.gz"
  payload = gzip.compress(("A sentence here.\n" * 2000).encode())
  path.write_bytes(payload[:len(payload) // 2])
  docs, stats = _read(str(path))
  assert dict(stats.skipped) == {data.UNREADABLE_FILE: 1}
  # What came before the cut is kept (but a cut last line).
  assert docs and all(s == "A sentence here."
                      for s in docs[0].sentences[:-1])
