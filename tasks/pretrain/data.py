"""Reading raw text for pre-training: BERT's plain-text format, with the
bad-input policy of `tasks.common.inputs`.

The format is BERT's `create_pretraining_data.py` input: one sentence per line,
a blank line between documents, UTF-8, any number of files (globs,
comma-separated; gzip files are decompressed,
`tasks.common.inputs.input_files`). A document is the sentences between blank
lines (or a file's start and end).

Bad input does not stop a run unless `strict`:

- a line that is not UTF-8 (`undecodable_text`) or longer than
  `max_line_chars` (`line_too_long`, e.g. a 100k-character line from a
  broken dump) is skipped; the rest of its document is kept;
- an empty file (no bytes, or only blank lines; `empty_file`) is skipped;
- a file that cannot be read at all (`unreadable_file`, e.g. a truncated
  gzip) is skipped from the point of failure.

Each is counted per reason and named (file, line) in the stats
(`record_stats.RecordStats`); with `strict=True` the first one raises
`input_errors.BadRecordError` (a `UserInputError`: one line, exit code 2 in the
binaries) naming the file and line. A pattern that matches no file is an
error either way (`io.NoMatchingFileError`, also a `FileNotFoundError`).
"""

import dataclasses
from typing import Iterator, List, Optional, Sequence, Union

from tasks.common.inputs import input_errors
from tasks.common.inputs import input_files
from tasks.common.inputs import record_checks
from tasks.common.inputs import record_stats

# Skip reasons, as they appear in the stats JSON (with records'
# `undecodable_text`).
LINE_TOO_LONG = "line_too_long"
EMPTY_FILE = "empty_file"
UNREADABLE_FILE = "unreadable_file"
UNDECODABLE_TEXT = input_errors.UNDECODABLE_TEXT

# A sentence per line: longer lines are not sentences (a paragraph or a whole
# article on one line, binary junk). BERT's corpora have none above ~2,000.
DEFAULT_MAX_LINE_CHARS = 10000


@dataclasses.dataclass(frozen=True)
class Document:
  """One document: its sentences, in order.

  Attributes:
    doc_id: where it comes from, e.g. "corpus.txt:12" (file and first line)
      or "wikipedia/20230601.en:train:17" (TFDS name, split, index).
    sentences: the sentences (non-empty, stripped).
  """
  doc_id: str
  sentences: List[str]


def read_documents(patterns: Union[str, Sequence[str]],
                   stats: record_stats.RecordStats,
                   max_line_chars: int = DEFAULT_MAX_LINE_CHARS
                   ) -> Iterator[Document]:
  """Yields the documents of plain-text files in BERT's format.

  Args:
    patterns: glob patterns (comma-separated string or a list).
    stats: where bad lines and files are counted (`stats.strict` decides
      whether they fail); `stats.examples_read` counts the lines read.
    max_line_chars: longer lines are bad (`line_too_long`).

  Raises:
    io.NoMatchingFileError: a pattern matches nothing.
    input_errors.BadRecordError: in strict mode, the first bad line or file.
  """
  for path in input_files.match_files(patterns):
    yield from _read_file(path, stats, max_line_chars)


def _read_file(path: str, stats: record_stats.RecordStats,
               max_line_chars: int) -> Iterator[Document]:
  sentences: List[str] = []
  start = 0
  any_text = False
  line_number = 0
  bad_before = stats.num_skipped
  try:
    for line_number, raw in input_files.read_lines(path):
      stats.examples_read += 1
      text = _check_line(raw, path, line_number, stats, max_line_chars)
      if text is None:
        continue
      if not text:
        if sentences:
          yield Document(f"{path}:{start}", sentences)
        sentences = []
        continue
      any_text = True
      if not sentences:
        start = line_number
      sentences.append(text)
  except input_errors.InputFileError as e:
    # Unreadable from here on: what was read before is kept.
    cause = e.__cause__ or e
    stats.handle_bad_record(input_errors.BadRecordError(
        path, f"line {line_number + 1}", "file", UNREADABLE_FILE,
        f"{type(cause).__name__}: {cause}"))
  if sentences:
    yield Document(f"{path}:{start}", sentences)
  # Empty: no bytes or only blank lines. A file whose lines were all bad has
  # them counted one by one already.
  if not any_text and stats.num_skipped == bad_before:
    stats.handle_bad_record(input_errors.BadRecordError(
        path, "line 1", "file", EMPTY_FILE, "no text (empty or blank)"))


def _check_line(raw: bytes, path: str, line_number: int,
                stats: record_stats.RecordStats,
                max_line_chars: int) -> Optional[str]:
  """The stripped text of a line ("" for a blank one), or None when it is
  bad and skipped."""
  c = record_checks.RecordChecker(path, f"line {line_number}")
  try:
    text = c.decode(raw, "text").strip()
    if len(text) > max_line_chars:
      raise c.error("text", LINE_TOO_LONG,
                    f"{len(text)} characters > max_line_chars "
                    f"{max_line_chars}")
  except input_errors.BadRecordError as e:
    stats.handle_bad_record(e)
    return None
  return text
