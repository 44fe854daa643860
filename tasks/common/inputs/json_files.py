"""Reading JSON inputs with errors that name the file.

`load_json` / `load_json_array` read a whole file (a repeated key refused
with `unique_keys`); `read_json_records` is the readers' contract for a file
holding one JSON array: each record validated, a bad one skipped and counted
or raised (`record_stats.RecordStats`), ids unique (`record_checks.UniqueIds`).
"""

import json
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, TypeVar

import tensorflow as tf

from tasks.common.inputs import input_errors
from tasks.common.inputs import record_checks
from tasks.common.inputs import record_stats


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
        raise input_errors.DuplicateIdError(
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
    raise input_errors.InputFileError(
        f"{path}: is a directory, not an input file")
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      raw = f.read()
  except (OSError, tf.errors.OpError) as e:
    raise input_errors.InputFileError(
        f"{path}: cannot read input file: {e}") from e
  text = raw.decode("utf-8", errors="surrogateescape")
  if not text.strip():
    raise input_errors.InputFileError(f"{path}: input file is empty")
  try:
    data = json.loads(text, object_pairs_hook=(
        reject_duplicate_keys(path) if unique_keys else None))
  except json.JSONDecodeError as e:
    raise input_errors.InputFileError(f"{path}: not valid JSON: {e}") from e
  return data


def load_json_array(path: str) -> List[Any]:
  """`load_json` of a file whose top level must be an array (of records).

  Raises:
    InputFileError: as `load_json`, or the top level is not an array.
  """
  data = load_json(path)
  if not isinstance(data, list):
    raise input_errors.InputFileError(
        f"{path}: expected a JSON array of records at the top level, got "
        f"{type(data).__name__}")
  return data


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
    stats = record_stats.RecordStats(input_file=path, strict=strict)
  data = load_json_array(path)
  if not data:
    raise input_errors.InputFileError(f"{path}: input file holds no records")
  ids = record_checks.UniqueIds(path, stats.skip_duplicate_ids, id_field)
  for index, raw in enumerate(data):
    stats.examples_read += 1
    try:
      record = validate(raw, path, index)
      if id_of is not None:
        ids.check(id_of(record), f"record #{index}")
      yield record
    except input_errors.BadRecordError as e:
      stats.handle_bad_record(e)
