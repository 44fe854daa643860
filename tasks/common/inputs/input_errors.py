"""What is wrong with a task's input: the file as a whole, or one record.

- `InputFileError`: the file cannot be used (missing, empty, not JSON);
  `DuplicateIdError` when two records share an id.
- `BadRecordError(file, record_id, field, reason)`: one record cannot be
  used, with the skip reasons every reader uses (`MISSING_FIELD`, ...), as
  they appear in the stats JSON. The bad-record policy that skips or raises
  them is `record_stats.RecordStats`.
"""

from typing import Dict

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
