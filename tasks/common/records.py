"""Reading raw JSON inputs, the bad-record policy, and cache statistics.

Every task reader follows the same contract:

- An empty, unreadable or malformed input file is a hard error that names the
  file (`InputFileError`).
- A bad record (missing field, wrong type, undecodable text, a task-specific
  inconsistency) raises `BadRecordError(file, record_id, field, reason)`.
  `RecordStats.handle_bad_record` then either re-raises it (`strict=True`)
  or skips it, counting it per reason and naming it in the stats JSON.
"""

import collections
import dataclasses
import json
from typing import Any, Dict, List

import tensorflow as tf

from etc_realformer.errors import UserInputError


class InputFileError(UserInputError):
  """The input file as a whole cannot be used (missing, empty, not JSON)."""


class BadRecordError(UserInputError):
  """One record cannot be used; names the file, record and field."""

  def __init__(self, file: str, record_id: str, field: str, reason: str,
               detail: str = ""):
    self.file = file
    self.record_id = record_id
    self.field = field
    self.reason = reason
    self.detail = detail
    message = (f"{file}: record {record_id!r}, field {field!r}: {reason}"
               + (f" ({detail})" if detail else ""))
    super().__init__(message)

  def to_dict(self) -> Dict[str, str]:
    return dict(file=self.file, id=self.record_id, field=self.field,
                reason=self.reason, detail=self.detail)


def load_json_array(path: str) -> List[Any]:
  """Loads a file holding one JSON array, with errors that name the file.

  Invalid UTF-8 bytes do not fail the whole file: they are decoded as lone
  surrogates (`surrogateescape`), so the record holding them can be reported
  as `undecodable_text` by `check_text` and skipped on its own.

  Raises:
    InputFileError: the file is missing, unreadable, empty, not JSON, or its
      top level is not an array.
  """
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      raw = f.read()
  except (OSError, tf.errors.OpError) as e:
    raise InputFileError(f"{path}: cannot read input file: {e}") from e
  text = raw.decode("utf-8", errors="surrogateescape")
  if not text.strip():
    raise InputFileError(f"{path}: input file is empty")
  try:
    data = json.loads(text)
  except json.JSONDecodeError as e:
    raise InputFileError(f"{path}: not valid JSON: {e}") from e
  if not isinstance(data, list):
    raise InputFileError(
        f"{path}: expected a JSON array of records at the top level, got "
        f"{type(data).__name__}")
  return data


def is_decodable(text: str) -> bool:
  """False for strings holding lone surrogates (bytes that were not UTF-8)."""
  try:
    text.encode("utf-8")
  except UnicodeEncodeError:
    return False
  return True


@dataclasses.dataclass
class RecordStats:
  """Counts for one input file, written as JSON next to the cached features.

  Attributes:
    input_file: the file read.
    strict: whether bad records fail (True) or are skipped (False).
    examples_read: records found in the file, good or bad.
    examples_written: records turned into cached examples.
    examples_truncated: written examples that lost some input to fit.
    truncation: totals of what was dropped (task-specific keys).
    skipped: number of skipped records per reason.
    skipped_records: one entry per skipped record: file, id, field, reason.
  """
  input_file: str = ""
  strict: bool = False
  examples_read: int = 0
  examples_written: int = 0
  examples_truncated: int = 0
  truncation: Dict[str, int] = dataclasses.field(
      default_factory=collections.Counter)
  skipped: Dict[str, int] = dataclasses.field(
      default_factory=collections.Counter)
  skipped_records: List[Dict[str, str]] = dataclasses.field(
      default_factory=list)

  @property
  def num_skipped(self) -> int:
    return sum(self.skipped.values())

  def handle_bad_record(self, error: BadRecordError) -> None:
    """Raises `error` in strict mode, else counts and names the record."""
    if self.strict:
      raise error
    self.skipped[error.reason] += 1
    self.skipped_records.append(error.to_dict())

  def add_truncation(self, amounts: Dict[str, int]) -> None:
    """Adds one written example's dropped amounts (all zero = untruncated)."""
    if any(v > 0 for v in amounts.values()):
      self.examples_truncated += 1
    for key, value in amounts.items():
      self.truncation[key] += int(value)

  def to_dict(self) -> Dict[str, Any]:
    return dict(
        input_file=self.input_file,
        strict=self.strict,
        examples_read=self.examples_read,
        examples_written=self.examples_written,
        examples_skipped=self.num_skipped,
        examples_truncated=self.examples_truncated,
        truncation=dict(sorted(self.truncation.items())),
        skipped=dict(sorted(self.skipped.items())),
        skipped_records=list(self.skipped_records),
    )

  def write_json(self, path: str) -> None:
    with tf.io.gfile.GFile(path, "w") as f:
      json.dump(self.to_dict(), f, indent=2, sort_keys=False)
      f.write("\n")


def read_stats_json(path: str) -> Dict[str, Any]:
  with tf.io.gfile.GFile(path, "r") as f:
    return json.load(f)


def record_id_of(record: Any, index: int, id_field: str = "id") -> str:
  """A record's id for messages; falls back to its position in the file."""
  if isinstance(record, dict) and isinstance(record.get(id_field), str):
    return record[id_field]
  return f"#{index}"
