"""Reading raw JSON inputs, the bad-record policy, and cache statistics.

Every task reader follows the same contract:

- An empty, unreadable or malformed input file is a hard error that names the
  file (`InputFileError`).
- A bad record (missing field, wrong type, undecodable text, a task-specific
  inconsistency) raises `BadRecordError(file, record_id, field, reason)`.
  `RecordStats.handle_bad_record` then either re-raises it (`strict=True`)
  or skips it, counting it per reason and naming it in the stats JSON.

Ids must be unique within a file (`UniqueIds`): a repeated id is refused
(`DuplicateIdError`, naming both records) unless the policy skips and counts
it (`RecordStats.skip_duplicate_ids`, reason `DUPLICATE_ID`).

`read_json_records` is that contract for a file holding one JSON array;
`skipping_bad_records` is the TFDS builders' version (skip, log once). Also
here: `write_json` (how the tasks write their reports and submissions),
`scoring_main` (the official-metric binaries' `main`) and
`find_manual_file(s)` (where the TFDS builders look for manually downloaded
files).
"""

import collections
import contextlib
import dataclasses
import json
import os
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional,
                    Sequence, Tuple, TypeVar)

from absl import logging
import tensorflow as tf

from etc_realformer.errors import UserInputError

# Skip reasons every reader uses, as they appear in the stats JSON.
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
UNDECODABLE_TEXT = "undecodable_text"
EMPTY_TEXT = "empty_text"
# A record whose id an earlier record of the same file has (with
# `RecordStats.skip_duplicate_ids`).
DUPLICATE_ID = "duplicate_id"


class InputFileError(UserInputError):
  """The input file as a whole cannot be used (missing, empty, not JSON)."""


class OutputFileError(UserInputError):
  """An output cannot be written: its folder is a regular file, the disk is
  full, it is read-only or not permitted."""


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
  """Turns the errors of writing `path` (an OSError: no space left, not a
  folder, read-only, no permission; or a tf.errors equivalent) into an
  `OutputFileError` naming it."""
  try:
    yield
  except OSError as e:
    raise OutputFileError(
        f"{path}: cannot write output: {e.strerror or e}") from e
  except (tf.errors.FailedPreconditionError, tf.errors.NotFoundError,
          tf.errors.PermissionDeniedError, tf.errors.ResourceExhaustedError,
          tf.errors.AlreadyExistsError, tf.errors.UnknownError) as e:
    raise OutputFileError(f"{path}: cannot write output: {e.message}") from e


@contextlib.contextmanager
def whole_file(path: str) -> Iterator[str]:
  """Yields the temporary sibling to write `path` as; renames it to `path`
  when the block succeeds, removes it when it fails (a full disk, an
  interrupt), so that `path` is never left half written. Errors name
  `path` (`writing`)."""
  tmp = f"{path}.tmp-{os.getpid()}"
  try:
    with writing(path):
      yield tmp
      if not tf.io.gfile.exists(tmp):
        # A GFile creates its file at the first write: none was made.
        with tf.io.gfile.GFile(tmp, "wb") as f:
          f.write(b"")
      tf.io.gfile.rename(tmp, path, overwrite=True)
  finally:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.remove(tmp)


class DuplicateIdError(InputFileError):
  """Two records of one file share an id: which one holds the truth is
  unknown, so the file is refused (`UniqueIds`)."""


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


class UniqueIds:
  """The ids of one file's records so far: each id once.

  A repeated id raises `DuplicateIdError` (naming the file, the id and both
  records), or, with `skip`, a `BadRecordError` (`DUPLICATE_ID`) for the
  reader to skip and count: the first record with the id is the one kept.

    ids = UniqueIds(path, skip=stats.skip_duplicate_ids)
    for number, raw in ...:
      ids.check(raw["id"], f"line {number}")
  """

  def __init__(self, file: str, skip: bool = False, field: str = "id",
               hint: str = " (or --skip_duplicate_ids to skip the repeats)"):
    """The ids of `file`.

    Args:
      file: the file (named in the errors).
      skip: skip and count repeats instead of refusing the file.
      field: the id's field, named in the errors.
      hint: appended to the refusal: how to get past it.
    """
    self.file = file
    self.skip = skip
    self.field = field
    self.hint = hint
    self._first: Dict[Any, str] = {}

  def check(self, record_id: Any, where: str) -> None:
    """Notes `record_id`, of the record at `where` ("line 3", "record #2").

    Raises:
      DuplicateIdError: an earlier record has the id (not `skip`).
      BadRecordError: the same, under `skip` (`DUPLICATE_ID`).
    """
    if not isinstance(record_id, (str, int)):
      record_id = repr(record_id)  # An id of another type: as written.
    first = self._first.setdefault(record_id, where)
    if first == where:
      return
    if self.skip:
      raise BadRecordError(self.file, str(record_id), self.field,
                           DUPLICATE_ID, f"{where} repeats {first}")
    raise DuplicateIdError(
        f"{self.file}: {self.field} {record_id!r} is duplicated: {first} "
        f"and {where}; ids must be unique{self.hint}")

  def __len__(self) -> int:
    return len(self._first)


def reject_duplicate_keys(path: str) -> Callable[[List[Tuple[str, Any]]],
                                                 Dict[str, Any]]:
  """A `json.load` `object_pairs_hook` that refuses an object with a key
  twice (`json` keeps the last silently: a submission `{id: answer}` whose
  id repeats would be scored on one of its answers).

  Raises (from the hook):
    DuplicateIdError: naming `path`, the key and both positions in the
      object.
  """
  def hook(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    first: Dict[str, int] = {}
    for position, (key, _) in enumerate(pairs):
      if key in first:
        raise DuplicateIdError(
            f"{path}: key {key!r} is duplicated: entries #{first[key]} and "
            f"#{position} of the same object; ids must be unique")
      first[key] = position
    return dict(pairs)
  return hook


def load_json(path: str, unique_keys: bool = False) -> Any:
  """Loads a file holding one JSON value, with errors that name the file.

  Invalid UTF-8 bytes do not fail the whole file: they are decoded as lone
  surrogates (`surrogateescape`), so the record holding them can be reported
  as `undecodable_text` by `check_text` and skipped on its own.

  Args:
    path: the file.
    unique_keys: refuse an object with a repeated key
      (`reject_duplicate_keys`): submissions keyed by id.

  Raises:
    InputFileError: the file is missing, unreadable (a directory), empty or
      not JSON; a `DuplicateIdError` for a repeated key under `unique_keys`.
  """
  if tf.io.gfile.isdir(path):
    raise InputFileError(f"{path}: is a directory, not an input file")
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      raw = f.read()
  except (OSError, tf.errors.OpError) as e:
    raise InputFileError(f"{path}: cannot read input file: {e}") from e
  text = raw.decode("utf-8", errors="surrogateescape")
  if not text.strip():
    raise InputFileError(f"{path}: input file is empty")
  try:
    data = json.loads(text, object_pairs_hook=(
        reject_duplicate_keys(path) if unique_keys else None))
  except json.JSONDecodeError as e:
    raise InputFileError(f"{path}: not valid JSON: {e}") from e
  return data


def load_json_array(path: str) -> List[Any]:
  """`load_json` of a file whose top level must be an array (of records).

  Raises:
    InputFileError: as `load_json`, or the top level is not an array.
  """
  data = load_json(path)
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


def check_text(value: Any, file: str, record_id: str, field: str,
               allow_empty: bool = False) -> str:
  """`value` if it is a decodable (and, unless `allow_empty`, non-blank)
  string.

  Raises:
    BadRecordError: `WRONG_TYPE`, `UNDECODABLE_TEXT` or `EMPTY_TEXT`, naming
      the file, record and field.
  """
  if not isinstance(value, str):
    raise BadRecordError(file, record_id, field, WRONG_TYPE,
                         f"expected a string, got {type(value).__name__}")
  if not is_decodable(value):
    raise BadRecordError(file, record_id, field, UNDECODABLE_TEXT,
                         "text is not valid UTF-8")
  if not allow_empty and not value.strip():
    raise BadRecordError(file, record_id, field, EMPTY_TEXT)
  return value


@dataclasses.dataclass
class RecordStats:
  """Counts for one input file, written as JSON next to the cached features.

  Attributes:
    input_file: the file read.
    strict: whether bad records fail (True) or are skipped (False).
    skip_duplicate_ids: whether a record repeating an earlier one's id is
      skipped and counted (`DUPLICATE_ID`) instead of refusing the file
      (`UniqueIds`); a setting, not written to the JSON (the skips are).
    examples_read: records found in the file, good or bad.
    examples_written: records turned into cached examples.
    examples_truncated: written examples that lost some input to fit.
    truncation: totals of what was dropped (task-specific keys).
    skipped: number of skipped records per reason.
    skipped_records: one entry per skipped record: file, id, field, reason.
  """
  input_file: str = ""
  strict: bool = False
  skip_duplicate_ids: bool = False
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
    """Writes the stats whole (`whole_file`)."""
    with whole_file(path) as tmp, tf.io.gfile.GFile(tmp, "w") as f:
      json.dump(self.to_dict(), f, indent=2, sort_keys=False)
      f.write("\n")


R = TypeVar("R")


def read_json_records(path: str, validate: Callable[[Any, str, int], R],
                      stats: Optional["RecordStats"] = None,
                      strict: bool = False,
                      id_of: Optional[Callable[[R], Any]] = None,
                      id_field: str = "id") -> Iterator[R]:
  """Yields the valid records of a file holding one JSON array of records.

  Args:
    path: the file.
    validate: (raw record, file, index) -> the validated record; raises
      `BadRecordError`.
    stats: where reads and skips are counted; a fresh one if None.
    strict: fail on the first bad record instead of skipping it. Ignored when
      `stats` is given (its own `strict` applies).
    id_of: a valid record's id, which must be unique in the file
      (`UniqueIds`, under `stats.skip_duplicate_ids`); None: not checked.
    id_field: the id's field, for the errors.

  Raises:
    InputFileError: the file is missing, empty, not a JSON array or holds no
      records; a `DuplicateIdError` for a repeated id.
    BadRecordError: a bad record, in strict mode.
  """
  if stats is None:
    stats = RecordStats(input_file=path, strict=strict)
  data = load_json_array(path)
  if not data:
    raise InputFileError(f"{path}: input file holds no records")
  ids = UniqueIds(path, stats.skip_duplicate_ids, id_field)
  for index, raw in enumerate(data):
    stats.examples_read += 1
    try:
      record = validate(raw, path, index)
      if id_of is not None:
        ids.check(id_of(record), f"record #{index}")
      yield record
    except BadRecordError as e:
      stats.handle_bad_record(e)


def skipping_bad_records(path: str,
                         read_records: Callable[..., Iterator[R]]
                         ) -> Iterator[R]:
  """`read_records(path, stats=...)`'s valid records; the bad ones are
  skipped and logged once at the end, as a warning with the counts per
  reason (the TFDS builders' policy)."""
  stats = RecordStats(input_file=path, strict=False)
  yield from read_records(path, stats=stats)
  if stats.num_skipped:
    logging.warning("%s: skipped %d bad records %s", path, stats.num_skipped,
                    dict(stats.skipped))


def read_stats_json(path: str) -> Dict[str, Any]:
  with tf.io.gfile.GFile(path, "r") as f:
    return json.load(f)


def record_id_of(record: Any, index: int, id_field: str = "id") -> str:
  """A record's id for messages; falls back to its position in the file."""
  if isinstance(record, dict) and isinstance(record.get(id_field), str):
    return record[id_field]
  return f"#{index}"


def write_json(path: str, value: Any, sort_keys: bool = False) -> None:
  """Writes `value` as UTF-8 JSON (non-ASCII kept, one-space indent, a final
  newline): the tasks' submissions and reports. Written whole
  (`whole_file`): a failure (a full disk) leaves no partial file, and is an
  `OutputFileError` naming `path`."""
  with whole_file(path) as tmp, tf.io.gfile.GFile(tmp, "w") as f:
    json.dump(value, f, indent=1, sort_keys=sort_keys, ensure_ascii=False)
    f.write("\n")


def scoring_main(usage: str, score_files: Callable[[str, str], Any]
                 ) -> Callable[[List[str]], None]:
  """The `main` of an official-metric binary, `python -m ... PREDICTIONS
  GOLD`: `score_files(PREDICTIONS, GOLD)` printed as JSON.

  Args:
    usage: the command line, for the error when the two files are not given.
    score_files: (predictions path, gold path) -> the JSON-able scores.
  """
  def main(argv: List[str]) -> None:
    if len(argv) != 3:
      raise UserInputError(f"usage: {usage}")
    print(json.dumps(score_files(argv[1], argv[2]), indent=2))
  return main


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
  raise InputFileError(
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
