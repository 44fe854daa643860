"""Reading and validating Natural Questions files, streamed line by line.

Released files `nq-{train,dev}-??.jsonl.gz` hold one JSON object per line:

  {"example_id": -1220107454853145579,          # int64
   "question_text": "who founded google",
   "document_url": "https://en.wikipedia.org//w/index.php?...",
   "document_html": "<html>...",               # optional, unused
   "document_tokens": [{"token": "<P>", "start_byte": 92, "end_byte": 95,
                        "html_token": true}, ...],
   "long_answer_candidates": [{"start_token": 14, "end_token": 80,
                               "start_byte": 560, "end_byte": 2000,
                               "top_level": true}, ...],
   "annotations": [{"annotation_id": 1234,
                    "long_answer": {"start_token": 14, "end_token": 80,
                                    "start_byte": 560, "end_byte": 2000,
                                    "candidate_index": 0},
                    "short_answers": [{"start_token": 20, "end_token": 22,
                                       "start_byte": 600, "end_byte": 630}],
                    "yes_no_answer": "NONE"}]}        # or "YES" / "NO"

Train lines have 1 annotation, dev lines 5, test lines none. A null long
answer is all -1 (`candidate_index` -1). Spans are [start, end) token
indices. The SIMPLIFIED format (`simplified-nq-train.jsonl.gz`,
`natural_questions.text_utils.simplify_nq_example`) has `document_text`
instead of `document_tokens`: the tokens joined by single spaces (split with
`split(" ")`), HTML tags as tokens such as `<P>` or `<Td_colspan="2">`, and
no byte offsets (read as -1 here). Both formats, gzipped (`.gz`, detected by
the gzip magic bytes) or plain, and globs of files are accepted.

Files are streamed: one line is parsed at a time (`document_html` is dropped
right away), so a 40 GB split never sits in memory.

Bad-record policy (`tasks.common.inputs`): an unreadable, empty or corrupt
(gzip) file is an `InputFileError` naming the file; a bad line (not JSON) or
record (missing field, wrong type, span out of range, empty document, ...)
is a `BadRecordError` naming file, example id (or `line N`) and field, which
`RecordStats` counts and skips, or raises with `strict`.
"""

import dataclasses
import json
import re
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from tasks.common.inputs import input_errors
from tasks.common.inputs import input_files
from tasks.common.inputs import record_checks
from tasks.common.inputs import record_stats

# Skip reasons of NQ, as they appear in the stats JSON (besides the common
# `input_errors.MISSING_FIELD`, `WRONG_TYPE`, `UNDECODABLE_TEXT`, `EMPTY_TEXT`).
BAD_JSON = "bad_json"
BAD_VALUE = "bad_value"
EMPTY_DOCUMENT = "empty_document"
SPAN_OUT_OF_RANGE = "span_out_of_range"
DUPLICATE_ID = input_errors.DUPLICATE_ID
NO_ANNOTATIONS = "no_annotations"  # only when labels are required

FULL = "full"
SIMPLIFIED = "simplified"

YES_NO_VALUES = ("YES", "NO", "NONE")

# Answer types (the classes of the model's answer type head), in the
# original's order; `labels_of` picks one per example.
NULL, YES, NO, LONG, SHORT = range(5)
ANSWER_TYPES: Tuple[str, ...] = ("null", "yes", "no", "long", "short")

# An HTML tag token of the simplified format ("<P>", "</Td>",
# '<Td_colspan="2">'); the full format flags them with `html_token`.
_HTML_TAG = re.compile(r"^</?[A-Za-z][^<>]*>$")


def is_html_tag(token: str) -> bool:
  return bool(_HTML_TAG.match(token))


@dataclasses.dataclass(frozen=True)
class Span:
  """A [start_token, end_token) span with its bytes (-1 when unknown/null)."""
  start_token: int = -1
  end_token: int = -1
  start_byte: int = -1
  end_byte: int = -1

  @property
  def is_null(self) -> bool:
    return self.start_token < 0 or self.end_token < 0

  def to_json(self) -> Dict[str, int]:
    return dict(start_token=self.start_token, end_token=self.end_token,
                start_byte=self.start_byte, end_byte=self.end_byte)


@dataclasses.dataclass(frozen=True)
class Candidate:
  """A long-answer candidate."""
  span: Span
  top_level: bool


@dataclasses.dataclass(frozen=True)
class Annotation:
  """One annotator's answer."""
  long_answer: Span
  candidate_index: int
  short_answers: Tuple[Span, ...]
  yes_no_answer: str  # "YES" / "NO" / "NONE"
  annotation_id: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class NqRecord:
  """One validated NQ example.

  Attributes:
    example_id: the int64 `example_id`.
    question: `question_text`.
    tokens: [N] document token strings.
    token_is_html: [N] whether each token is an HTML tag.
    token_start_byte, token_end_byte: [N] byte offsets into `document_html`;
      -1 everywhere in the simplified format.
    candidates: `long_answer_candidates` in file order.
    annotations: in file order (empty for an unlabelled example).
    document_url: `document_url` ("" when absent).
    format: `FULL` or `SIMPLIFIED`.
  """
  example_id: int
  question: str
  tokens: Tuple[str, ...]
  token_is_html: Tuple[bool, ...]
  token_start_byte: Tuple[int, ...]
  token_end_byte: Tuple[int, ...]
  candidates: Tuple[Candidate, ...]
  annotations: Tuple[Annotation, ...] = ()
  document_url: str = ""
  format: str = FULL

  @property
  def has_labels(self) -> bool:
    return bool(self.annotations)

  @property
  def num_tokens(self) -> int:
    return len(self.tokens)


@dataclasses.dataclass(frozen=True)
class Labels:
  """Example-level training labels (first annotation), token spans.

  answer_type: `ANSWER_TYPES` index (-1 when unlabelled).
  long_span / short_span: [start, end) document token spans, (-1, -1) none.
  """
  answer_type: int
  long_span: Tuple[int, int]
  short_span: Tuple[int, int]


def labels_of(record: NqRecord, predict_la_when_no_sa: bool = False
              ) -> Labels:
  """The original's example-level labels from the first annotation.

  Answer type: yes/no when `yes_no_answer` is YES/NO, else short when there
  are short answers, else long when the long answer is not null, else null.
  The short span runs from the first short answer's start to the last one's
  end (the original merges multi-span answers). With
  `predict_la_when_no_sa` the short span of an example without short
  answers is its long answer (an option of the original, off by default).
  """
  if not record.annotations:
    return Labels(-1, (-1, -1), (-1, -1))
  a = record.annotations[0]
  long_span = ((-1, -1) if a.long_answer.is_null else
               (a.long_answer.start_token, a.long_answer.end_token))
  if a.short_answers:
    short_span = (a.short_answers[0].start_token,
                  a.short_answers[-1].end_token)
  elif predict_la_when_no_sa and long_span[0] >= 0:
    short_span = long_span
  else:
    short_span = (-1, -1)
  if a.yes_no_answer == "YES":
    answer_type = YES
  elif a.yes_no_answer == "NO":
    answer_type = NO
  elif a.short_answers:
    answer_type = SHORT
  elif long_span[0] >= 0:
    answer_type = LONG
  else:
    answer_type = NULL
  return Labels(answer_type, long_span, short_span)


# ---------------------------------------------------------------- validation
def _span(c: record_checks.RecordChecker, value: Any, field: str,
          num_tokens: int, allow_null: bool) -> Span:
  """A {start_token, end_token[, start_byte, end_byte]} object."""
  value = c.dict_(value, field)
  start = c.int_(c.get(value, "start_token", f"{field}.start_token"),
                 f"{field}.start_token")
  end = c.int_(c.get(value, "end_token", f"{field}.end_token"),
               f"{field}.end_token")
  start_byte = c.int_(value.get("start_byte", -1), f"{field}.start_byte")
  end_byte = c.int_(value.get("end_byte", -1), f"{field}.end_byte")
  if allow_null and start < 0 and end < 0:
    return Span(-1, -1, -1, -1)
  if not 0 <= start < end <= num_tokens:
    raise c.error(field, SPAN_OUT_OF_RANGE,
                  f"[{start}, {end}) not inside the document's "
                  f"{num_tokens} tokens")
  if (start_byte >= 0) != (end_byte >= 0) or (
      start_byte >= 0 and start_byte >= end_byte):
    raise c.error(field, SPAN_OUT_OF_RANGE,
                  f"bytes [{start_byte}, {end_byte})")
  return Span(start, end, start_byte, end_byte)


def _well_formed_tokens(items: List[Any]) -> Optional[Tuple[
    List[str], List[bool], List[int], List[int]]]:
  """(tokens, is_html, start_bytes, end_bytes) of `document_tokens` when
  every item passes the checks of `_read_document`'s loop, else None.

  The common case, checked column by column: a page has thousands of
  tokens, and the item-by-item checks took a third of a page's
  preprocessing time. On None the loop runs and names the first bad field.
  """
  try:
    tokens = [item["token"] for item in items]
    is_html = [item["html_token"] for item in items]
    starts = [item.get("start_byte", -1) for item in items]
    ends = [item.get("end_byte", -1) for item in items]
  except (TypeError, KeyError, AttributeError):
    return None
  # Exact types, as JSON decodes them (a bool is no int); anything else
  # goes to the loop's checks.
  if not (all(type(item) is dict for item in items) and
          all(type(t) is str for t in tokens) and
          all(type(h) is bool for h in is_html) and
          all(type(b) is int for b in starts) and
          all(type(b) is int for b in ends) and
          record_checks.is_decodable("".join(tokens))):
    return None
  return tokens, is_html, starts, ends


def _read_document(c: record_checks.RecordChecker, raw: Dict[str, Any]):
  """(tokens, is_html, start_bytes, end_bytes, format) of either format."""
  if "document_tokens" in raw:
    items = c.list_(raw["document_tokens"], "document_tokens")
    columns = _well_formed_tokens(items)
    if columns is not None:
      return (*columns, FULL)
    tokens, is_html, starts, ends = [], [], [], []
    for i, item in enumerate(items):
      field = f"document_tokens[{i}]"
      item = c.dict_(item, field)
      tokens.append(c.text(c.get(item, "token", f"{field}.token"),
                           f"{field}.token", allow_empty=True))
      is_html.append(c.bool_(c.get(item, "html_token", f"{field}.html_token"),
                             f"{field}.html_token"))
      starts.append(c.int_(item.get("start_byte", -1), f"{field}.start_byte"))
      ends.append(c.int_(item.get("end_byte", -1), f"{field}.end_byte"))
    return tokens, is_html, starts, ends, FULL
  if "document_text" in raw:
    text = c.text(raw["document_text"], "document_text", allow_empty=True)
    tokens = text.split(" ") if text.strip() else []
    n = len(tokens)
    return (tokens, [is_html_tag(t) for t in tokens], [-1] * n, [-1] * n,
            SIMPLIFIED)
  raise c.error("document_tokens", input_errors.MISSING_FIELD,
                "neither document_tokens nor document_text")


def validate_record(raw: Any, file: str, line: int,
                    require_labels: bool = False) -> NqRecord:
  """Checks one decoded JSON line.

  Args:
    raw: the decoded JSON value.
    file: the file it came from (for messages).
    line: its 1-based line number (names it when it has no usable id).
    require_labels: a record without annotations is bad (training).

  Raises:
    input_errors.BadRecordError: naming file, example id and field.
  """
  record_id = f"line {line}"
  if isinstance(raw, dict) and isinstance(raw.get("example_id"), int):
    record_id = str(raw["example_id"])
  c = record_checks.RecordChecker(file, record_id)
  raw = c.dict_(raw, "<record>")
  example_id = c.int_(c.get(raw, "example_id", "example_id"), "example_id")
  if not -2**63 <= example_id < 2**63:
    raise c.error("example_id", BAD_VALUE, "not an int64")
  question = c.text(c.get(raw, "question_text", "question_text"),
                    "question_text")
  url = raw.get("document_url", "")
  url = c.text(url, "document_url", allow_empty=True)
  tokens, is_html, starts, ends, fmt = _read_document(c, raw)
  if not tokens or all(not t.strip() for t in tokens):
    raise c.error("document_tokens" if fmt == FULL else "document_text",
                  EMPTY_DOCUMENT)
  n = len(tokens)

  candidates = []
  for i, cand in enumerate(c.list_(
      c.get(raw, "long_answer_candidates", "long_answer_candidates"),
      "long_answer_candidates")):
    field = f"long_answer_candidates[{i}]"
    span = _span(c, cand, field, n, allow_null=False)
    top = c.bool_(c.get(cand, "top_level", f"{field}.top_level"),
                  f"{field}.top_level")
    candidates.append(Candidate(span, top))

  annotations = []
  raw_annotations = raw.get("annotations", [])
  for i, ann in enumerate(c.list_(raw_annotations, "annotations")):
    field = f"annotations[{i}]"
    ann = c.dict_(ann, field)
    long_raw = c.get(ann, "long_answer", f"{field}.long_answer")
    long_answer = _span(c, long_raw, f"{field}.long_answer", n,
                        allow_null=True)
    cand_index = c.int_(long_raw.get("candidate_index", -1),
                        f"{field}.long_answer.candidate_index")
    if not -1 <= cand_index < len(candidates) or (
        (cand_index < 0) != long_answer.is_null):
      raise c.error(f"{field}.long_answer.candidate_index", SPAN_OUT_OF_RANGE,
                    f"{cand_index} with {len(candidates)} candidates")
    shorts = tuple(
        _span(c, s, f"{field}.short_answers[{j}]", n, allow_null=False)
        for j, s in enumerate(c.list_(
            c.get(ann, "short_answers", f"{field}.short_answers"),
            f"{field}.short_answers")))
    yes_no = c.text(c.get(ann, "yes_no_answer", f"{field}.yes_no_answer"),
                    f"{field}.yes_no_answer")
    if yes_no not in YES_NO_VALUES:
      raise c.error(f"{field}.yes_no_answer", BAD_VALUE,
                    f"{yes_no!r} is not one of {YES_NO_VALUES}")
    ann_id = ann.get("annotation_id")
    annotations.append(Annotation(
        long_answer=long_answer, candidate_index=cand_index,
        short_answers=shorts, yes_no_answer=yes_no,
        annotation_id=ann_id if isinstance(ann_id, int) else None))
  if require_labels and not annotations:
    raise c.error("annotations", NO_ANNOTATIONS)

  return NqRecord(
      example_id=example_id, question=question, tokens=tuple(tokens),
      token_is_html=tuple(is_html), token_start_byte=tuple(starts),
      token_end_byte=tuple(ends), candidates=tuple(candidates),
      annotations=tuple(annotations), document_url=url, format=fmt)


# ------------------------------------------------------------------ reading


def read_records(path: str,
                 stats: Optional[record_stats.RecordStats] = None,
                 strict: bool = False,
                 require_labels: bool = False) -> Iterator[NqRecord]:
  """Yields the valid records of one NQ file (full or simplified format).

  Args:
    path: a `.jsonl.gz` or `.jsonl` file.
    stats: where reads and skips are counted; a fresh one if None.
    strict: fail on the first bad record instead of skipping it. Ignored
      when `stats` is given (its own `strict` applies).
    require_labels: records without annotations are bad (training).

  Raises:
    input_errors.InputFileError: the file is unreadable, corrupt or empty; a
      `input_errors.DuplicateIdError` for an `example_id` given twice (unless
      `stats.skip_duplicate_ids`).
    input_errors.BadRecordError: a bad line or record, in strict mode.
  """
  if stats is None:
    stats = record_stats.RecordStats(input_file=path, strict=strict)
  ids = record_checks.UniqueIds(path, stats.skip_duplicate_ids, "example_id")
  for number, line in input_files.read_record_lines(path):
    stats.examples_read += 1
    try:
      try:
        raw = json.loads(line.decode("utf-8", errors="surrogateescape"))
      except (json.JSONDecodeError, RecursionError) as e:
        raise input_errors.BadRecordError(path, f"line {number}", "<line>",
                                          BAD_JSON, str(e)[:200]) from e
      if isinstance(raw, dict):
        raw.pop("document_html", None)  # large and unused
      record = validate_record(raw, path, number, require_labels)
      ids.check(record.example_id, f"line {number}")
      yield record
    except input_errors.BadRecordError as e:
      stats.handle_bad_record(e)


def read_all(patterns: Sequence[str] | str,
             stats: Optional[record_stats.RecordStats] = None,
             strict: bool = False,
             require_labels: bool = False) -> Iterator[NqRecord]:
  """`read_records` over every file matching `patterns`, in sorted order."""
  for path in input_files.match_files(patterns):
    yield from read_records(path, stats=stats, strict=strict,
                            require_labels=require_labels)


def record_to_json(record: NqRecord) -> Dict[str, Any]:
  """The record back in the released full format (no `document_html`)."""
  def cand(c: Candidate):
    return dict(c.span.to_json(), top_level=c.top_level)

  def ann(a: Annotation):
    out = dict(long_answer=dict(a.long_answer.to_json(),
                                candidate_index=a.candidate_index),
               short_answers=[s.to_json() for s in a.short_answers],
               yes_no_answer=a.yes_no_answer)
    if a.annotation_id is not None:
      out["annotation_id"] = a.annotation_id
    return out

  return dict(
      example_id=record.example_id, question_text=record.question,
      document_url=record.document_url,
      document_tokens=[dict(token=t, start_byte=s, end_byte=e, html_token=h)
                       for t, h, s, e in zip(
                           record.tokens, record.token_is_html,
                           record.token_start_byte, record.token_end_byte)],
      long_answer_candidates=[cand(c) for c in record.candidates],
      annotations=[ann(a) for a in record.annotations])
