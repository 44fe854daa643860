"""Checks of one raw record's fields, named by file, record and field.

Every task reader validates a record field by field; a field that cannot be
used raises `records.BadRecordError(file, record_id, field, reason)`, which
the bad-record policy (`records.RecordStats`) skips and counts, or raises
under `--strict`. A `RecordChecker` binds the file and the record once, so
that each check names only its field:

  c = RecordChecker(path, records.record_id_of(raw, index))
  raw = c.json_object(raw)
  c.require(raw, ("id", "question"))
  question = c.text(raw["question"], "question")
  if not question.endswith("?"):
    raise c.error("question", "no_question_mark")
"""

from typing import Any, Dict, List, Optional, Sequence

from tasks.common import records

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
            ) -> records.BadRecordError:
    """The error of `field` (to raise, or to return as a skip reason)."""
    return records.BadRecordError(self.file, self.record_id, field, reason,
                                  detail)

  def get(self, obj: Dict[str, Any], key: str,
          field: Optional[str] = None) -> Any:
    """`obj[key]`; `field` (default `key`) names it in the error.

    Raises:
      records.BadRecordError: `MISSING_FIELD`.
    """
    if key not in obj:
      raise self.error(key if field is None else field,
                       records.MISSING_FIELD)
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
      records.BadRecordError: `WRONG_TYPE`, "expected <expected>, got
        <type>".
    """
    if not isinstance(value, kind) or (kind is int and
                                       isinstance(value, bool)):
      raise self.error(field, records.WRONG_TYPE,
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
      records.BadRecordError: `WRONG_TYPE`, `UNDECODABLE_TEXT` or
        `EMPTY_TEXT`.
    """
    return records.check_text(value, self.file, self.record_id, field,
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
      records.BadRecordError: not a list (`WRONG_TYPE`), empty
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
      records.BadRecordError: `UNDECODABLE_TEXT`, naming the first bad byte.
    """
    try:
      return raw.decode("utf-8")
    except UnicodeDecodeError as e:
      raise self.error(field, records.UNDECODABLE_TEXT,
                       f"not UTF-8 at byte {e.start}") from e
