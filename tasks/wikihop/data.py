"""Reading and validating the released qangaroo WikiHop files.

`train.json` / `dev.json` each hold ONE JSON array of records:

  {"id": "WH_train_0",
   "query": "participant_of juan rossell",
   "candidates": ["1996 summer olympics", "olympic games", ...],
   "answer": "1996 summer olympics",
   "supports": ["The 2004 Summer Olympic Games ...", ...]}

Candidates and the answer are compared after `strip().lower()`, as the
original preprocessing does; the label is the index of the first candidate
equal to the answer.
"""

import dataclasses
from typing import Any, Iterator, List, Optional

from tasks.common.inputs import json_files
from tasks.common.inputs import record_checks
from tasks.common.inputs import record_stats

# Skip reasons, as they appear in the stats JSON, besides those of
# `records` (missing_field, wrong_type, undecodable_text, empty_text).
EMPTY_SUPPORTS = "empty_supports"
EMPTY_CANDIDATES = "empty_candidates"
ANSWER_NOT_IN_CANDIDATES = "answer_not_in_candidates"
# Raised by featurization: the candidates alone do not fit the sequences.
TOO_LONG = "too_long"

REQUIRED_FIELDS = ("id", "query", "candidates", "answer", "supports")


def normalize_candidate(text: str) -> str:
  """How candidates and answers are compared (the original's convention)."""
  return text.strip().lower()


@dataclasses.dataclass(frozen=True)
class WikiHopRecord:
  """One validated WikiHop record (candidates/answer normalized)."""
  id: str
  query: str
  candidates: List[str]
  answer: str
  supports: List[str]
  # Index of the answer among `candidates`.
  answer_index: int

  def to_json(self) -> dict:
    """The record back in the released format."""
    return dict(id=self.id, query=self.query, candidates=list(self.candidates),
                answer=self.answer, supports=list(self.supports))


def validate_record(raw: Any, file: str, index: int) -> WikiHopRecord:
  """Checks one raw JSON record and returns it normalized.

  Args:
    raw: the decoded JSON value.
    file: the file it came from (for messages).
    index: its position in the file (names it when it has no usable id).

  Raises:
    input_errors.BadRecordError: naming file, record id and field.
  """
  c = record_checks.RecordChecker(file, record_checks.record_id_of(raw, index))
  raw = c.json_object(raw)
  c.require(raw, REQUIRED_FIELDS)
  c.text(raw["id"], "id")
  query = c.text(raw["query"], "query")
  candidates = c.text_list(raw["candidates"], "candidates", EMPTY_CANDIDATES)
  # A blank support is a document without sentences: the original keeps it
  # (a paragraph global token), so it is no reason to skip the record.
  supports = c.text_list(raw["supports"], "supports", EMPTY_SUPPORTS,
                         allow_empty_items=True)
  answer = c.text(raw["answer"], "answer")
  candidates = [normalize_candidate(x) for x in candidates]
  answer = normalize_candidate(answer)
  if answer not in candidates:
    raise c.error("answer", ANSWER_NOT_IN_CANDIDATES,
                  f"answer {answer!r} not among {len(candidates)} candidates")
  return WikiHopRecord(id=c.record_id, query=query, candidates=candidates,
                       answer=answer, supports=supports,
                       answer_index=candidates.index(answer))


def read_records(path: str,
                 stats: Optional[record_stats.RecordStats] = None,
                 strict: bool = False) -> Iterator[WikiHopRecord]:
  """Yields the valid records of one qangaroo WikiHop file.

  Args:
    path: `train.json` / `dev.json` (or any file in that format).
    stats: where reads and skips are counted; a fresh one if None.
    strict: fail on the first bad record instead of skipping it. Ignored when
      `stats` is given (its own `strict` applies).

  Raises:
    input_errors.InputFileError: the file is missing, empty or not a JSON array;
      a `input_errors.DuplicateIdError` for an id given twice (unless
      `stats.skip_duplicate_ids`).
    input_errors.BadRecordError: a bad record, in strict mode.
  """
  return json_files.read_json_records(path, validate_record, stats, strict,
                                      id_of=lambda r: r.id)
