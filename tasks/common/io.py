"""File input and output shared by the tasks' readers and writers.

- `match_files`: the one expansion of input patterns (globs, comma-separated
  or listed; sorted per pattern, without repeats; a pattern that matches
  nothing is one line naming it, exit code 2 in the binaries). It is
  `etc_realformer.data.tfrecords.match_files`, the TFRecords' expansion.
- `read_lines` / `read_record_lines`: a text file's lines, streamed (a 40 GB
  file never sits in memory) and gunzipped when the file is gzip data,
  whatever its name; an unreadable or corrupt file is an `InputFileError`
  naming it.
- `write_jsonl`: JSON values one per line, gzipped when the path ends in
  `.gz`; the same values give the same bytes.
- `unbatch`: the batched arrays of a predict pass as one dict per example.
"""

import gzip
import io
import json
import zlib
from typing import (Any, Dict, Iterable, Iterator, List, Mapping, Sequence,
                    Tuple, Union)

import tensorflow as tf

from etc_realformer.data import tfrecords
from tasks.common import records

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
    records.InputFileError: the file cannot be opened, or is corrupt or
      truncated (bad gzip data); the lines before the damage have been
      yielded.
  """
  try:
    raw = tf.io.gfile.GFile(path, "rb")
    magic = raw.read(len(GZIP_MAGIC))
    raw.seek(0)
  except (OSError, tf.errors.OpError) as e:
    raise records.InputFileError(f"{path}: cannot read input file: {e}") from e
  # Not GFile.readline, which drops every b"\r".
  stream = (gzip.GzipFile(fileobj=raw, mode="rb") if magic == GZIP_MAGIC
            else io.BufferedReader(_RawFile(raw), _BUFFER_SIZE))
  number = 0
  with raw:
    while True:
      try:
        line = stream.readline()
      except (OSError, EOFError, zlib.error, tf.errors.OpError) as e:
        raise records.InputFileError(
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
    records.InputFileError: as `read_lines`, or the file holds no non-blank
      line.
  """
  any_record = False
  for number, line in read_lines(path):
    if line.strip():
      any_record = True
      yield number, line
  if not any_record:
    raise records.InputFileError(f"{path}: input file is empty (no records)")


def write_jsonl(path: str, values: Iterable[Any]) -> int:
  """Writes JSON values one per line (UTF-8, non-ASCII kept); returns how
  many.

  A path ending in `.gz` is written as gzip data with a zero timestamp and no
  file name in its header (as `gzip.compress(..., mtime=0)`), so that the
  same values always give the same bytes. The values are streamed, and the
  file written whole (`records.whole_file`: a failure leaves no partial
  file and is an `OutputFileError` naming `path`).
  """
  compressor = (zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
                if path.endswith(".gz") else None)
  count = 0
  with records.whole_file(path) as tmp, tf.io.gfile.GFile(tmp, "wb") as f:
    for value in values:
      line = (json.dumps(value, ensure_ascii=False) + "\n").encode("utf-8")
      f.write(compressor.compress(line) if compressor else line)
      count += 1
    if compressor:
      f.write(compressor.flush())
  return count


def unbatch(batched: Mapping[str, Any]) -> List[Dict[str, Any]]:
  """name -> [N, ...] arrays as N dicts name -> [...], one per example.

  Raises:
    ValueError: the arrays do not all have N rows.
  """
  lengths = {name: len(value) for name, value in batched.items()}
  if len(set(lengths.values())) > 1:
    raise ValueError(f"unbatch: arrays of different lengths {lengths}")
  count = next(iter(lengths.values()), 0)
  return [{k: v[i] for k, v in batched.items()} for i in range(count)]
