"""Tests for tasks.common.io: the one pattern expansion, the gzip-aware line
readers, write_jsonl and unbatch."""

import gzip
import json

import numpy as np
import pytest

from etc_realformer import cli
from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError
from tasks.common import io as io_lib
from tasks.common import records


def _touch(path):
  path.write_bytes(b"x\n")
  return str(path)


def test_match_files_sorted_per_pattern_without_repeats(tmp_path):
  b, a, c = (_touch(tmp_path / n) for n in ("b.txt", "a.txt", "c.gz"))
  assert io_lib.match_files(str(tmp_path / "*.txt")) == [a, b]
  # Patterns keep their order; a file matched twice is listed once.
  assert io_lib.match_files(f"{tmp_path}/*.gz,{tmp_path}/*") == [c, a, b]
  assert io_lib.match_files([f"{tmp_path}/b.txt", f"{tmp_path}/*.txt",
                             " "]) == [b, a]
  # A trailing comma is no pattern.
  assert io_lib.match_files(f"{a},") == [a]
  # It is the TFRecords' expansion, with another name for the files.
  assert tfrecords.match_files(a) == io_lib.match_files(a)


def test_match_files_errors_name_the_pattern_and_are_one_line(tmp_path):
  missing = str(tmp_path / "none-*.jsonl")
  with pytest.raises(io_lib.NoMatchingFileError) as e:
    io_lib.match_files(f"{_touch(tmp_path / 'a.txt')},{missing}")
  assert str(e.value) == f"no input file matches {missing!r}"
  # A user's mistake (one line, exit code 2), also a FileNotFoundError.
  assert isinstance(e.value, UserInputError)
  assert isinstance(e.value, FileNotFoundError)
  assert isinstance(e.value, cli.USER_ERRORS)
  with pytest.raises(io_lib.NoMatchingFileError, match="no TFRecord file"):
    tfrecords.match_files(missing)
  with pytest.raises(io_lib.NoMatchingFileError, match="no input file given"):
    io_lib.match_files(" , ")


def test_read_lines_of_plain_and_gzip_files(tmp_path):
  text = b"one\n\n  \nthree\r\nlast without newline"
  plain = tmp_path / "plain.txt"
  plain.write_bytes(text)
  # Gzip data is told by its first bytes, whatever the file's name.
  packed = tmp_path / "packed.txt"
  packed.write_bytes(gzip.compress(text))
  expected = [(1, b"one\n"), (2, b"\n"), (3, b"  \n"), (4, b"three\r\n"),
              (5, b"last without newline")]
  assert list(io_lib.read_lines(str(plain))) == expected
  assert list(io_lib.read_lines(str(packed))) == expected
  assert list(io_lib.read_record_lines(str(packed))) == [
      expected[0], expected[3], expected[4]]


def test_read_lines_errors_name_the_file(tmp_path):
  with pytest.raises(records.InputFileError, match="missing.txt: cannot read"):
    list(io_lib.read_lines(str(tmp_path / "missing.txt")))
  blank = tmp_path / "blank.jsonl.gz"
  blank.write_bytes(gzip.compress(b"\n \n"))
  assert len(list(io_lib.read_lines(str(blank)))) == 2
  with pytest.raises(records.InputFileError,
                     match="blank.jsonl.gz: input file is empty"):
    list(io_lib.read_record_lines(str(blank)))


def test_truncated_gzip_yields_the_lines_before_the_damage(tmp_path):
  payload = gzip.compress(b"".join(b"line %d\n" % i for i in range(3000)))
  cut = tmp_path / "cut.gz"
  cut.write_bytes(payload[:len(payload) // 2])
  got = []
  with pytest.raises(records.InputFileError,
                     match=r"cut.gz: corrupt or truncated after line \d+"):
    for number, line in io_lib.read_lines(str(cut)):
      got.append((number, line))
  assert got and got[0] == (1, b"line 0\n")
  assert [n for n, _ in got] == list(range(1, len(got) + 1))


def test_write_jsonl_plain_and_gzip(tmp_path):
  values = [{"id": 1, "text": "naïve ☃"}, [1, 2], "s"]
  plain = str(tmp_path / "out.jsonl")
  assert io_lib.write_jsonl(plain, values) == 3
  with open(plain, encoding="utf-8") as f:
    lines = f.read().splitlines()
  assert lines[0] == '{"id": 1, "text": "naïve ☃"}'  # Non-ASCII kept.
  assert [json.loads(line) for line in lines] == values
  packed = str(tmp_path / "out.jsonl.gz")
  assert io_lib.write_jsonl(packed, iter(values)) == 3
  with open(packed, "rb") as f:
    data = f.read()
  # The same bytes as a one-shot gzip.compress with a zero timestamp (no
  # file name, no time): reruns give identical files.
  with open(plain, "rb") as f:
    assert data == gzip.compress(f.read(), mtime=0)
  assert [json.loads(l) for _, l in io_lib.read_lines(packed)] == values
  assert io_lib.write_jsonl(str(tmp_path / "empty.jsonl"), []) == 0


def test_unbatch():
  batched = {"a": np.arange(3), "b": np.array([[1, 2], [3, 4], [5, 6]])}
  rows = io_lib.unbatch(batched)
  assert len(rows) == 3
  assert rows[1]["a"] == 1 and rows[2]["b"].tolist() == [5, 6]
  assert io_lib.unbatch({}) == []
  with pytest.raises(ValueError, match="different lengths"):
    io_lib.unbatch({"a": np.arange(3), "b": np.arange(2)})
