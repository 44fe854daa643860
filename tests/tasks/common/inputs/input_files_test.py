"""Tests for tasks.common.inputs.input_files: the one pattern expansion, the
gzip-aware line readers and the manual-file lookup."""

import gzip

import pytest

from etc_realformer import cli
from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError
from tasks.common.inputs import input_errors
from tasks.common.inputs import input_files


def test_find_manual_file_looks_in_the_subdirs_in_order(tmp_path):
  (tmp_path / "sub").mkdir()
  (tmp_path / "sub" / "x.json").write_text("[]")
  found = input_files.find_manual_file(str(tmp_path), "x.json", ("", "sub"))
  assert found == str(tmp_path / "sub" / "x.json")
  with pytest.raises(input_errors.InputFileError,
                     match=r"y.json not found .*/sub'\]\). Download it"):
    input_files.find_manual_file(str(tmp_path), "y.json", ("", "sub"),
                                 "Download it.")


def _touch(path):
  path.write_bytes(b"x\n")
  return str(path)


def test_match_files_sorted_per_pattern_without_repeats(tmp_path):
  b, a, c = (_touch(tmp_path / n) for n in ("b.txt", "a.txt", "c.gz"))
  assert input_files.match_files(str(tmp_path / "*.txt")) == [a, b]
  # Patterns keep their order; a file matched twice is listed once.
  assert input_files.match_files(f"{tmp_path}/*.gz,{tmp_path}/*") == [c, a, b]
  assert input_files.match_files([f"{tmp_path}/b.txt", f"{tmp_path}/*.txt",
                                  " "]) == [b, a]
  # A trailing comma is no pattern.
  assert input_files.match_files(f"{a},") == [a]
  # It is the TFRecords' expansion, with another name for the files.
  assert tfrecords.match_files(a) == input_files.match_files(a)


def test_match_files_errors_name_the_pattern_and_are_one_line(tmp_path):
  missing = str(tmp_path / "none-*.jsonl")
  with pytest.raises(input_files.NoMatchingFileError) as e:
    input_files.match_files(f"{_touch(tmp_path / 'a.txt')},{missing}")
  assert str(e.value) == f"no input file matches {missing!r}"
  # A user's mistake (one line, exit code 2), also a FileNotFoundError.
  assert isinstance(e.value, UserInputError)
  assert isinstance(e.value, FileNotFoundError)
  assert isinstance(e.value, cli.USER_ERRORS)
  with pytest.raises(input_files.NoMatchingFileError, match="no TFRecord file"):
    tfrecords.match_files(missing)
  with pytest.raises(
      input_files.NoMatchingFileError, match="no input file given"):
    input_files.match_files(" , ")


def test_read_lines_of_plain_and_gzip_files(tmp_path):
  text = b"one\n\n  \nthree\r\nlast without newline"
  plain = tmp_path / "plain.txt"
  plain.write_bytes(text)
  # Gzip data is told by its first bytes, whatever the file's name.
  packed = tmp_path / "packed.txt"
  packed.write_bytes(gzip.compress(text))
  expected = [(1, b"one\n"), (2, b"\n"), (3, b"  \n"), (4, b"three\r\n"),
              (5, b"last without newline")]
  assert list(input_files.read_lines(str(plain))) == expected
  assert list(input_files.read_lines(str(packed))) == expected
  assert list(input_files.read_record_lines(str(packed))) == [
      expected[0], expected[3], expected[4]]


def test_read_lines_errors_name_the_file(tmp_path):
  with pytest.raises(
      input_errors.InputFileError, match="missing.txt: cannot read"):
    list(input_files.read_lines(str(tmp_path / "missing.txt")))
  blank = tmp_path / "blank.jsonl.gz"
  blank.write_bytes(gzip.compress(b"\n \n"))
  assert len(list(input_files.read_lines(str(blank)))) == 2
  with pytest.raises(input_errors.InputFileError,
                     match="blank.jsonl.gz: input file is empty"):
    list(input_files.read_record_lines(str(blank)))


def test_truncated_gzip_yields_the_lines_before_the_damage(tmp_path):
  payload = gzip.compress(b"".join(b"line %d\n" % i for i in range(3000)))
  cut = tmp_path / "cut.gz"
  cut.write_bytes(payload[:len(payload) // 2])
  got = []
  with pytest.raises(input_errors.InputFileError,
                     match=r"cut.gz: corrupt or truncated after line \d+"):
    for number, line in input_files.read_lines(str(cut)):
      got.append((number, line))
  assert got and got[0] == (1, b"line 0\n")
  assert [n for n, _ in got] == list(range(1, len(got) + 1))
