"""Finding and reading a task's input files.

- `match_files`: the one expansion of input patterns (globs, comma-separated
  or listed; sorted per pattern, without repeats; a pattern that matches
  nothing is one line naming it, exit code 2 in the binaries). It is
  `etc_realformer.data.tfrecords.match_files`, the TFRecords' expansion.
- `read_lines` / `read_record_lines`: a text file's lines, streamed (a 40 GB
  file never sits in memory) and gunzipped when the file is gzip data,
  whatever its name; an unreadable or corrupt file is an `InputFileError`
  naming it.
- `find_manual_file(s)`: where the TFDS builders look for manually
  downloaded files.
"""

import gzip
import io
import os
from typing import Dict, Iterator, List, Mapping, Sequence, Tuple, Union
import zlib

import tensorflow as tf

from etc_realformer.data import tfrecords
from tasks.common.inputs import input_errors


def find_manual_file(manual_dir: str, filename: str,
                     subdirs: Sequence[str] = ("",),
                     instructions: str = "") -> str:
  """The path of `filename` in `manual_dir` or one of its `subdirs`.

  Args:
    manual_dir: where the user put a manually downloaded dataset.
    filename: the released file's name.
    subdirs: folders below `manual_dir` to look in, in order ("" = itself).
    instructions: the download instructions, appended to the error.

  Raises:
    InputFileError: the file is in none of them (the message lists where it
      was looked for).
  """
  for subdir in subdirs:
    path = os.path.join(manual_dir, subdir, filename)
    if tf.io.gfile.exists(path):
      return path
  looked = [os.path.join(manual_dir, s) for s in subdirs]
  raise input_errors.InputFileError(
      f"{filename} not found in manual_dir {manual_dir} (looked in "
      f"{looked}). {instructions}".rstrip())


def find_manual_files(manual_dir: str, split_files: Mapping[str, str],
                      subdirs: Sequence[str] = ("",),
                      instructions: str = "") -> Dict[str, str]:
  """{split: path} of `find_manual_file` for each split's file name.

  Raises:
    InputFileError: a file is missing (the first one, by split order).
  """
  return {split: find_manual_file(os.fspath(manual_dir), name, subdirs,
                                  instructions)
          for split, name in split_files.items()}


# The first bytes of gzip data (RFC 1952).
GZIP_MAGIC = b"\x1f\x8b"
# Bytes read from a file at a time.
_BUFFER_SIZE = 1 << 20
NoMatchingFileError = tfrecords.NoMatchingFileError


def match_files(patterns: Union[str, Sequence[str]],
                kind: str = "input file") -> List[str]:
  """The files of comma-separated (or listed) glob patterns.

  Each pattern's matches are sorted, the patterns keep their order, and a
  file matched twice is listed once (`tfrecords.match_files`).

  Args:
    patterns: the patterns.
    kind: what the files are, for the error ("no <kind> matches ...").

  Raises:
    NoMatchingFileError: a pattern matches nothing, or none is given (a
      `UserInputError` and a `FileNotFoundError`).
  """
  return tfrecords.match_files(patterns, kind=kind)


def read_lines(path: str) -> Iterator[Tuple[int, bytes]]:
  """Yields (1-based line number, line bytes) of a text file, blank lines
  included; gzip data (told by its first bytes) is decompressed.

  The bytes are the file's, line end included (a line ends at b"\n" only);
  decoding is left to the caller, so that an undecodable line can be
  reported (and skipped) on its own.

  Raises:
    input_errors.InputFileError: the file cannot be opened, or is corrupt or
      truncated (bad gzip data); the lines before the damage have been
      yielded.
  """
  try:
    raw = tf.io.gfile.GFile(path, "rb")
    magic = raw.read(len(GZIP_MAGIC))
    raw.seek(0)
  except (OSError, tf.errors.OpError) as e:
    raise input_errors.InputFileError(
        f"{path}: cannot read input file: {e}") from e
  # Not GFile.readline, which drops every b"\r".
  stream = (gzip.GzipFile(fileobj=raw, mode="rb") if magic == GZIP_MAGIC
            else io.BufferedReader(_RawFile(raw), _BUFFER_SIZE))
  number = 0
  with raw:
    while True:
      try:
        line = stream.readline()
      except (OSError, EOFError, zlib.error, tf.errors.OpError) as e:
        raise input_errors.InputFileError(
            f"{path}: corrupt or truncated after line {number}: {e}") from e
      if not line:
        return
      number += 1
      yield number, line


class _RawFile(io.RawIOBase):
  """A `tf.io.gfile.GFile` opened "rb" as a raw stream (for a buffered
  reader's exact `readline`)."""

  def __init__(self, f: tf.io.gfile.GFile):
    super().__init__()
    self._f = f

  def readable(self) -> bool:
    return True

  def readinto(self, buffer) -> int:
    data = self._f.read(len(buffer))
    buffer[:len(data)] = data
    return len(data)


def read_record_lines(path: str) -> Iterator[Tuple[int, bytes]]:
  """`read_lines` without the blank lines: a file of one record per line
  (JSON lines).

  Raises:
    input_errors.InputFileError: as `read_lines`, or the file holds no non-blank
      line.
  """
  any_record = False
  for number, line in read_lines(path):
    if line.strip():
      any_record = True
      yield number, line
  if not any_record:
    raise input_errors.InputFileError(
        f"{path}: input file is empty (no records)")
