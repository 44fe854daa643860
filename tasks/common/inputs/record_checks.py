"""Checks of one raw record's fields, named by file, record and field.

Every task reader validates a record field by field; a field that cannot be
used raises `input_errors.BadRecordError(file, record_id, field, reason)`,
which the bad-record policy (`record_stats.RecordStats`) skips and counts,
or raises under `--strict`. A `RecordChecker` binds the file and the record
once, so that each check names only its field:

  c = RecordChecker(path, record_checks.record_id_of(raw, index))
  raw = c.json_object(raw)
  c.require(raw, ("id", "question"))
  question = c.text(raw["question"], "question")
  if not question.endswith("?"):
    raise c.error("question", "no_question_mark")

Also here: `check_text` and `is_decodable` (text fields), `record_id_of`
(a record's id for messages) and `UniqueIds` (ids must be unique within a
file: a repeated id is refused, `DuplicateIdError` naming both records,
unless the policy skips and counts it, reason `DUPLICATE_ID`).
"""

from typing import Any, Dict, List, Optional, Sequence

from tasks.common.inputs import input_errors


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
      raise input_errors.BadRecordError(self.file, str(record_id), self.field,
                                        input_errors.DUPLICATE_ID,
                                        f"{where} repeats {first}")
    raise input_errors.DuplicateIdError(
        f"{self.file}: {self.field} {record_id!r} is duplicated: {first} "
        f"and {where}; ids must be unique{self.hint}")

  def __len__(self) -> int:
    return len(self._first)


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
    raise input_errors.BadRecordError(
        file, record_id, field, input_errors.WRONG_TYPE,
        f"expected a string, got {type(value).__name__}")
  if not is_decodable(value):
    raise input_errors.BadRecordError(file, record_id, field,
                                      input_errors.UNDECODABLE_TEXT,
                                      "text is not valid UTF-8")
  if not allow_empty and not value.strip():
    raise input_errors.BadRecordError(file, record_id, field,
                                      input_errors.EMPTY_TEXT)
  return value


def record_id_of(record: Any, index: int, id_field: str = "id") -> str:
  """A record's id for messages; falls back to its position in the file."""
  if isinstance(record, dict) and isinstance(record.get(id_field), str):
    return record[id_field]
  return f"#{index}"


# How the type checks name what they expected.
_KIND_NAMES = {int: "an integer", bool: "true/false", list: "a list",
               dict: "an object", str: "a string"}


class RecordChecker:
  """The field checks of one record; each error names file, record, field.

  Attributes:
    file: the file the record comes from.
    record_id: its id (or position, e.g. "#3" or "line 4") for messages.
  """

  def __init__(self, file: str, record_id: str):
    self.file = file
    self.record_id = record_id

  def error(self, field: str, reason: str, detail: str = ""
            ) -> input_errors.BadRecordError:
    """The error of `field` (to raise, or to return as a skip reason)."""
    return input_errors.BadRecordError(self.file, self.record_id, field, reason,
                                       detail)

  def get(self, obj: Dict[str, Any], key: str,
          field: Optional[str] = None) -> Any:
    """`obj[key]`; `field` (default `key`) names it in the error.

    Raises:
      input_errors.BadRecordError: `MISSING_FIELD`.
    """
    if key not in obj:
      raise self.error(key if field is None else field,
                       input_errors.MISSING_FIELD)
    return obj[key]

  def require(self, obj: Dict[str, Any], fields: Sequence[str]) -> None:
    """Raises `MISSING_FIELD` for the first of `fields` not in `obj`."""
    for field in fields:
      self.get(obj, field)

  def typed(self, value: Any, field: str, kind: type,
            expected: Optional[str] = None) -> Any:
    """`value` if it is a `kind` (int, bool, list, dict or str; a bool is no
    int).

    Args:
      value: the value.
      field: its name.
      kind: the type it must have.
      expected: how the error names what was expected (default: the kind,
        e.g. "a list").

    Raises:
      input_errors.BadRecordError: `WRONG_TYPE`, "expected <expected>, got
        <type>".
    """
    if not isinstance(value, kind) or (kind is int and
                                       isinstance(value, bool)):
      raise self.error(field, input_errors.WRONG_TYPE,
                       f"expected {expected or _KIND_NAMES[kind]}, got "
                       f"{type(value).__name__}")
    return value

  def int_(self, value: Any, field: str) -> int:
    return self.typed(value, field, int)

  def bool_(self, value: Any, field: str) -> bool:
    return self.typed(value, field, bool)

  def list_(self, value: Any, field: str) -> List[Any]:
    return self.typed(value, field, list)

  def dict_(self, value: Any, field: str) -> Dict[str, Any]:
    return self.typed(value, field, dict)

  def json_object(self, value: Any, field: str = "<record>"
                  ) -> Dict[str, Any]:
    """`value` if it is a JSON object (the record itself, by default)."""
    return self.typed(value, field, dict, "a JSON object")

  def text(self, value: Any, field: str, allow_empty: bool = False) -> str:
    """`value` if it is a decodable (and, unless `allow_empty`, non-blank)
    string.

    Raises:
      input_errors.BadRecordError: `WRONG_TYPE`, `UNDECODABLE_TEXT` or
        `EMPTY_TEXT`.
    """
    return check_text(value, self.file, self.record_id, field,
                              allow_empty)

  def text_list(self, value: Any, field: str, empty_reason: str,
                allow_empty_items: bool = False) -> List[str]:
    """`value` if it is a non-empty list of `text`s.

    Args:
      value: the value.
      field: its name; an item is named `field[i]`.
      empty_reason: the skip reason of an empty list.
      allow_empty_items: blank strings are valid items.

    Raises:
      input_errors.BadRecordError: not a list (`WRONG_TYPE`), empty
        (`empty_reason`), or a bad item (as `text`).
    """
    self.typed(value, field, list, "a list of strings")
    if not value:
      raise self.error(field, empty_reason)
    return [self.text(v, f"{field}[{i}]", allow_empty=allow_empty_items)
            for i, v in enumerate(value)]

  def decode(self, raw: bytes, field: str) -> str:
    """`raw` decoded as UTF-8.

    Raises:
      input_errors.BadRecordError: `UNDECODABLE_TEXT`, naming the first bad
        byte.
    """
    try:
      return raw.decode("utf-8")
    except UnicodeDecodeError as e:
      raise self.error(field, input_errors.UNDECODABLE_TEXT,
                       f"not UTF-8 at byte {e.start}") from e
