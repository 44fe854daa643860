"""Reading and validating the released HotpotQA (distractor) files.

`hotpot_train_v1.1.json` / `hotpot_dev_distractor_v1.json` each hold ONE JSON
array of records:

  {"_id": "5a8b57f25542995d1e6f1371",
   "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
   "answer": "yes",
   "type": "comparison",          # or "bridge"
   "level": "hard",               # optional, unused
   "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood", 0]],
   "context": [["Ed Wood (film)", ["Ed Wood is a 1994 ...", ...]], ...]}

A record without `answer` / `supporting_facts` (a test-set file) is read as
unlabelled. Supporting facts are looked up by title; a fact naming a title
that is not in the context, or a sentence index past its paragraph, is kept
in the gold (the official metric counts it as missed) but can get no label.
"""

import collections
import dataclasses
from typing import Any, Dict, Iterator, List, Optional, Tuple

from tasks.common.inputs import input_errors
from tasks.common.inputs import json_files
from tasks.common.inputs import record_checks
from tasks.common.inputs import record_stats

# Skip reasons, as they appear in the stats JSON, besides those of
# `records` (missing_field, wrong_type, undecodable_text, empty_text).
EMPTY_CONTEXT = "empty_context"
DUPLICATE_ID = input_errors.DUPLICATE_ID
# Training-only skips, raised once the features are built (as the original:
# such examples give no usable training signal).
NO_SUPPORTING_FACTS = "no_supporting_facts"  # none among the kept tokens
ANSWER_NOT_FOUND = "answer_not_found"  # not in any supporting title/sentence
ANSWER_TRUNCATED = "answer_truncated"  # only in text dropped to fit

REQUIRED_FIELDS = ("_id", "question", "context")
LABEL_FIELDS = ("answer", "supporting_facts")

# Answer types (the answer type head's classes), as the original.
SPAN, YES, NO = 0, 1, 2
ANSWER_TYPE_NAMES = ("span", "yes", "no")


def answer_type_of(answer: str) -> int:
  """YES / NO for the literal answers "yes" / "no", else SPAN."""
  return {"yes": YES, "no": NO}.get(answer, SPAN)


@dataclasses.dataclass(frozen=True)
class HotpotRecord:
  """One validated HotpotQA record.

  Attributes:
    id: `_id`.
    question: the question.
    titles: [P] paragraph titles, in context order.
    sentences: [P][S_p] the paragraphs' sentences.
    answer: the gold answer; None when unlabelled.
    type: "bridge" / "comparison" ("" when absent).
    supporting_facts: [[title, sent_id]] as given; None when unlabelled.
  """
  id: str
  question: str
  titles: Tuple[str, ...]
  sentences: Tuple[Tuple[str, ...], ...]
  answer: Optional[str] = None
  type: str = ""
  supporting_facts: Optional[Tuple[Tuple[str, int], ...]] = None

  @property
  def has_labels(self) -> bool:
    return self.answer is not None and self.supporting_facts is not None

  def supporting_sentences(self) -> Dict[str, List[int]]:
    """title -> sentence ids of its supporting facts."""
    out = collections.defaultdict(list)
    for title, sent_id in self.supporting_facts or ():
      out[title].append(sent_id)
    return dict(out)

  def to_json(self) -> Dict[str, Any]:
    """The record back in the released format."""
    out = {"_id": self.id, "question": self.question,
           "context": [[t, list(s)] for t, s in zip(self.titles,
                                                    self.sentences)],
           "type": self.type}
    if self.answer is not None:
      out["answer"] = self.answer
    if self.supporting_facts is not None:
      out["supporting_facts"] = [[t, i] for t, i in self.supporting_facts]
    return out


def _check_paragraph(c: record_checks.RecordChecker, value: Any,
                     index: int) -> Tuple[str, Tuple[str, ...]]:
  field = f"context[{index}]"
  if (not isinstance(value, list) or len(value) != 2 or
      not isinstance(value[1], list)):
    raise c.error(field, input_errors.WRONG_TYPE,
                  "expected [title, [sentences]]")
  title = c.text(value[0], f"{field}[0]")
  # Released paragraphs do hold empty / whitespace-only sentences; they are
  # kept (they get a global token and no long tokens), so sentence indices
  # stay those of the file.
  sentences = tuple(c.text(s, f"{field}[1][{j}]", allow_empty=True)
                    for j, s in enumerate(value[1]))
  return title, sentences


def _check_supporting_facts(c: record_checks.RecordChecker, value: Any
                            ) -> Tuple[Tuple[str, int], ...]:
  c.typed(value, "supporting_facts", list, "a list of [title, sent_id]")
  facts = []
  for i, fact in enumerate(value):
    field = f"supporting_facts[{i}]"
    if (not isinstance(fact, list) or len(fact) != 2 or
        not isinstance(fact[1], int) or isinstance(fact[1], bool)):
      raise c.error(field, input_errors.WRONG_TYPE, "expected [title, sent_id]")
    facts.append((c.text(fact[0], f"{field}[0]", allow_empty=True), fact[1]))
  return tuple(facts)


def validate_record(raw: Any, file: str, index: int,
                    require_labels: bool = False) -> HotpotRecord:
  """Checks one raw JSON record.

  Args:
    raw: the decoded JSON value.
    file: the file it came from (for messages).
    index: its position in the file (names it when it has no usable id).
    require_labels: `answer` and `supporting_facts` must be present.

  Raises:
    input_errors.BadRecordError: naming file, record id and field.
  """
  c = record_checks.RecordChecker(
      file, record_checks.record_id_of(raw, index, id_field="_id"))
  raw = c.json_object(raw)
  c.require(raw, REQUIRED_FIELDS + (LABEL_FIELDS if require_labels else ()))
  c.text(raw["_id"], "_id")
  question = c.text(raw["question"], "question")
  context = c.typed(raw["context"], "context", list, "a list of paragraphs")
  if not context:
    raise c.error("context", EMPTY_CONTEXT)
  paragraphs = [_check_paragraph(c, p, i) for i, p in enumerate(context)]
  answer = None
  if "answer" in raw:
    answer = c.text(raw["answer"], "answer")
  facts = None
  if "supporting_facts" in raw:
    facts = _check_supporting_facts(c, raw["supporting_facts"])
  qtype = raw.get("type", "")
  if not isinstance(qtype, str):
    raise c.error("type", input_errors.WRONG_TYPE, "expected a string")
  return HotpotRecord(
      id=c.record_id, question=question,
      titles=tuple(t for t, _ in paragraphs),
      sentences=tuple(s for _, s in paragraphs),
      answer=answer, type=qtype, supporting_facts=facts)


def read_records(path: str,
                 stats: Optional[record_stats.RecordStats] = None,
                 strict: bool = False,
                 require_labels: bool = False) -> Iterator[HotpotRecord]:
  """Yields the valid records of one HotpotQA file.

  Args:
    path: a released file (or any file in that format).
    stats: where reads and skips are counted; a fresh one if None.
    strict: fail on the first bad record instead of skipping it. Ignored when
      `stats` is given (its own `strict` applies).
    require_labels: records without answer/supporting facts are bad.

  Raises:
    input_errors.InputFileError: the file is missing, empty or not a JSON array;
      a `input_errors.DuplicateIdError` for an `_id` given twice (unless
      `stats.skip_duplicate_ids`).
    input_errors.BadRecordError: a bad record, in strict mode.
  """
  def validate(raw: Any, file: str, index: int) -> HotpotRecord:
    return validate_record(raw, file, index, require_labels)

  return json_files.read_json_records(path, validate, stats, strict,
                                      id_of=lambda r: r.id, id_field="_id")
