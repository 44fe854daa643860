"""Reading, validating and de-duplicating the released OpenKP jsonl files.

`OpenKPTrain.jsonl`, `OpenKPDev.jsonl`, `OpenKPEvalPublic.jsonl` hold one JSON
object per line:

  {"url": "http://...",
   "text": "words separated by single spaces",
   "VDOM": "[{\"Id\": 0, \"text\": \"...\", \"feature\": [20 numbers],
             \"start_idx\": 0, \"end_idx\": 7}, ...]",   # a JSON *string*
   "KeyPhrases": [["machine", "learning"], ["tensorflow"]]}  # not in Eval

Words are `text.split(" ")` (empty words from double spaces included). A VDOM
element covers words `[start_idx, end_idx)`; its `feature` holds 10 numbers
for the element and 10 for its parent, each (x, width, y, height, is_block,
is_inline, is_heading, is_leaf, font_size, is_bold).

Validation follows the original data preparation (input_validate_and_dedup):

- the VDOM elements are contiguous, from word 0 to the last word, and each
  element's text equals its words joined by spaces;
- a keyphrase (its non-empty stripped items joined by spaces) must occur in
  the text as whole words, case-insensitively; keyphrases that do not are
  dropped (counted), a record left with none is skipped;
- at most 3 keyphrases are kept (the dev set has up to 5);
- duplicate URLs are removed: for labelled files the record with the most
  valid keyphrases (then the earliest) is kept, for unlabelled files the
  first one.

Unlike the original, which asserts, an invalid record is skipped, counted and
named (`tasks.common.inputs`), or fails the run with `strict=True`.
"""

import collections
import dataclasses
import json
import math
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from tasks.common.inputs import input_errors
from tasks.common.inputs import input_files
from tasks.common.inputs import record_checks
from tasks.common.inputs import record_stats

# Skip reasons of OpenKP, as they appear in the stats JSON (besides the
# common `input_errors.MISSING_FIELD`, `WRONG_TYPE`, `UNDECODABLE_TEXT`,
# `EMPTY_TEXT`).
NOT_JSON = "not_json"
INVALID_VDOM = "invalid_vdom"
VDOM_NOT_CONTIGUOUS = "vdom_not_contiguous"
VDOM_TEXT_MISMATCH = "vdom_text_mismatch"
INVALID_VDOM_FEATURE = "invalid_vdom_feature"
NO_VALID_KEYPHRASE = "no_valid_keyphrase"
DUPLICATE_URL = "duplicate_url"
# Raised by featurization: no gold keyphrase survives truncation (labelled
# files only; such a record teaches nothing).
KEYPHRASES_TRUNCATED = "keyphrases_truncated"

MAX_KEYPHRASES = 3
NUM_VDOM_FEATURES = 20
# Positions of the 0/1 indicators in `feature` (element, then parent):
# is_block, is_inline, is_heading, is_leaf, is_bold.
INDICATOR_POSITIONS = (4, 5, 6, 7, 9, 14, 15, 16, 17, 19)


@dataclasses.dataclass(frozen=True)
class VdomElement:
  """One VDOM element: words [start_idx, end_idx) and 20 visual numbers."""
  text: str
  features: Tuple[float, ...]
  start_idx: int
  end_idx: int


@dataclasses.dataclass(frozen=True)
class OpenKPRecord:
  """One validated OpenKP record.

  Attributes:
    url: the document URL (its id).
    text: the document text.
    vdom: the VDOM elements, contiguous over `words`.
    keyphrases: the valid keyphrases (at most 3), each its words joined by a
      space, original case; None for unlabelled (EvalPublic) records.
    line: 0-based line number in the file.
    num_keyphrases_dropped: keyphrases dropped as not whole words in the
      text, or beyond the first 3.
  """
  url: str
  text: str
  vdom: Tuple[VdomElement, ...]
  keyphrases: Optional[Tuple[str, ...]]
  line: int = 0
  num_keyphrases_dropped: int = 0

  @property
  def words(self) -> List[str]:
    return self.text.split(" ")

  @property
  def element_starts(self) -> List[int]:
    return [e.start_idx for e in self.vdom]

  @property
  def element_features(self) -> List[Tuple[float, ...]]:
    return [e.features for e in self.vdom]

  def vdom_json(self) -> str:
    """The VDOM back as the released JSON string."""
    return json.dumps([
        dict(Id=0, text=e.text, feature=list(e.features),
             start_idx=e.start_idx, end_idx=e.end_idx) for e in self.vdom
    ], ensure_ascii=False)

  def to_json(self) -> Dict[str, Any]:
    """The record in the released format (keyphrases as kept)."""
    out = dict(url=self.url, text=self.text, VDOM=self.vdom_json())
    if self.keyphrases is not None:
      out["KeyPhrases"] = [kp.split(" ") for kp in self.keyphrases]
    return out


# ------------------------------------------------------------- keyphrases
def join_keyphrase(items: Sequence[str]) -> str:
  """A released keyphrase (list of words) as one string, as the original."""
  return " ".join(item.strip() for item in items if item.strip())


def occurs_as_whole_words(text_lower: str, phrase: str) -> bool:
  """Whether `phrase` (lower-cased) occurs in `text_lower` as whole words.

  Whole words = bounded by a single space or the ends of the text (the words
  are `text.split(" ")`).
  """
  needle = phrase.lower()
  if not needle:
    return False
  j = text_lower.find(needle)
  while j >= 0:
    end = j + len(needle)
    if ((j == 0 or text_lower[j - 1] == " ") and
        (end == len(text_lower) or text_lower[end] == " ")):
      return True
    j = text_lower.find(needle, j + 1)
  return False


def keyphrase_positions(record: OpenKPRecord) -> List[Tuple[int, int]]:
  """(start word, length) of each distinct keyphrase's first occurrence.

  As the original featurization: a keyphrase is matched case-insensitively as
  whole words inside one VDOM element (it may not straddle two), the first
  element that holds it wins. The positions come in the original's label
  order: by that element, then, within one element, by the phrase padded
  with a space on each side, sorted (the original's search keys). Keyphrases
  found nowhere inside an element are omitted.
  """
  if not record.keyphrases:
    return []
  # The original sorts its search keys " phrase "; the padding only matters
  # for characters below the space, but it is its order.
  wanted = sorted({kp.lower() for kp in record.keyphrases},
                  key=lambda p: f" {p} ")
  missing = set(wanted)
  positions: List[Tuple[int, int]] = []
  for element in record.vdom:
    if not missing:
      break
    haystack = " " + element.text.lower() + " "
    for phrase in wanted:
      if phrase not in missing:
        continue
      offset = haystack.find(" " + phrase + " ")
      if offset >= 0:
        start = element.start_idx + haystack[:offset].count(" ")
        positions.append((start, phrase.count(" ") + 1))
        missing.remove(phrase)
  return positions


# ------------------------------------------------------------- validation
def _is_number(value: Any) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool) and
          math.isfinite(value))


def _is_index(value: Any) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def parse_vdom(c: record_checks.RecordChecker, vdom_str: str,
               words: Sequence[str]) -> Tuple[VdomElement, ...]:
  """Parses and checks the VDOM JSON string against the record's words."""
  try:
    raw = json.loads(vdom_str)
  except json.JSONDecodeError as e:
    raise c.error("VDOM", INVALID_VDOM, f"not valid JSON: {e}") from e
  if not isinstance(raw, list) or not raw:
    raise c.error("VDOM", INVALID_VDOM,
                  "expected a non-empty JSON array of elements")
  elements = []
  expected_start = 0
  for i, el in enumerate(raw):
    element = _parse_element(c, el, f"VDOM[{i}]", words, expected_start)
    elements.append(element)
    expected_start = element.end_idx
  if expected_start != len(words):
    raise c.error("VDOM", VDOM_NOT_CONTIGUOUS,
                  f"elements end at word {expected_start}, the text has "
                  f"{len(words)} words")
  return tuple(elements)


def _parse_element(c: record_checks.RecordChecker, el: Any, field: str,
                   words: Sequence[str], expected_start: int) -> VdomElement:
  """One VDOM element, which must start at word `expected_start`."""
  if not isinstance(el, dict):
    raise c.error(field, INVALID_VDOM,
                  f"expected an object, got {type(el).__name__}")
  for key in ("text", "feature", "start_idx", "end_idx"):
    if key not in el:
      raise c.error(f"{field}.{key}", INVALID_VDOM, "missing")
  start, end = el["start_idx"], el["end_idx"]
  if not (_is_index(start) and _is_index(end)):
    raise c.error(f"{field}.start_idx", INVALID_VDOM,
                  f"indices must be integers, got {start!r}, {end!r}")
  if start != expected_start or end < start or end > len(words):
    raise c.error(f"{field}.start_idx", VDOM_NOT_CONTIGUOUS,
                  f"element covers words [{start}, {end}), expected to start "
                  f"at {expected_start} and end within {len(words)} words")
  text = c.text(el["text"], f"{field}.text", allow_empty=True)
  if text != " ".join(words[start:end]):
    raise c.error(f"{field}.text", VDOM_TEXT_MISMATCH,
                  f"element text {text[:40]!r} differs from words "
                  f"[{start}, {end})")
  feats = el["feature"]
  if (not isinstance(feats, list) or len(feats) != NUM_VDOM_FEATURES or
      not all(_is_number(v) for v in feats)):
    raise c.error(f"{field}.feature", INVALID_VDOM_FEATURE,
                  f"expected {NUM_VDOM_FEATURES} finite numbers")
  bad = [p for p in INDICATOR_POSITIONS if feats[p] not in (0, 1)]
  if bad:
    raise c.error(f"{field}.feature", INVALID_VDOM_FEATURE,
                  f"indicators at {bad} are not 0 or 1")
  return VdomElement(text=text, features=tuple(float(v) for v in feats),
                     start_idx=start, end_idx=end)


def validate_record(raw: Any, file: str, line: int,
                    labeled: bool) -> Tuple[OpenKPRecord, int]:
  """Checks one decoded JSON line.

  Args:
    raw: the decoded JSON value.
    file: the file it came from (for messages).
    line: its 0-based line number (names it when it has no usable url).
    labeled: whether `KeyPhrases` is required (train/dev) or ignored (eval).

  Returns:
    (the record, the number of valid keyphrases before keeping 3).

  Raises:
    input_errors.BadRecordError: naming file, url and field.
  """
  record_id = record_checks.record_id_of(raw, line, id_field="url")
  if record_id.startswith("#"):
    record_id = f"line {line + 1}"
  c = record_checks.RecordChecker(file, record_id)
  raw = c.json_object(raw)
  c.require(raw, ("url", "text", "VDOM") +
            (("KeyPhrases",) if labeled else ()))
  url = c.text(raw["url"], "url", allow_empty=True)
  text = c.text(raw["text"], "text")
  vdom_str = c.text(raw["VDOM"], "VDOM", allow_empty=True)
  words = text.split(" ")
  vdom = parse_vdom(c, vdom_str, words)

  keyphrases = None
  num_valid = 0
  dropped = 0
  if labeled:
    raw_kps = c.typed(raw["KeyPhrases"], "KeyPhrases", list,
                      "a list of word lists")
    text_lower = text.lower()
    valid = []
    for i, items in enumerate(raw_kps):
      if not isinstance(items, list) or not all(
          isinstance(w, str) for w in items):
        raise c.error(f"KeyPhrases[{i}]", input_errors.WRONG_TYPE,
                      "expected a list of strings")
      c.text(" ".join(items), f"KeyPhrases[{i}]", allow_empty=True)
      phrase = join_keyphrase(items)
      if occurs_as_whole_words(text_lower, phrase):
        valid.append(phrase)
    if not valid:
      raise c.error("KeyPhrases", NO_VALID_KEYPHRASE,
                    f"none of {len(raw_kps)} keyphrases occurs as whole "
                    "words")
    num_valid = len(valid)
    dropped = len(raw_kps) - min(num_valid, MAX_KEYPHRASES)
    keyphrases = tuple(valid[:MAX_KEYPHRASES])
  return OpenKPRecord(url=url, text=text, vdom=vdom, keyphrases=keyphrases,
                      line=line, num_keyphrases_dropped=dropped), num_valid


def infer_labeled(path: str) -> bool:
  """EvalPublic files carry no KeyPhrases; train/dev files do."""
  return "eval" not in os.path.basename(path).lower()


def read_records(path: str,
                 stats: Optional[record_stats.RecordStats] = None,
                 strict: bool = False,
                 labeled: Optional[bool] = None) -> List[OpenKPRecord]:
  """Valid, de-duplicated records of one OpenKP jsonl file, in file order.

  Args:
    path: an OpenKP jsonl file.
    stats: where reads, skips and dropped keyphrases are counted (truncation
      key `keyphrases_dropped`); a fresh one if None.
    strict: fail on the first bad record (ignored when `stats` is given).
    labeled: require KeyPhrases; None = infer from the file name (files named
      *Eval* are unlabelled).

  Raises:
    input_errors.InputFileError: the file is missing or empty, or holds no
      record.
    input_errors.BadRecordError: a bad record or duplicate URL, in strict mode.
  """
  if stats is None:
    stats = record_stats.RecordStats(input_file=path, strict=strict)
  if labeled is None:
    labeled = infer_labeled(path)
  candidates: List[Tuple[OpenKPRecord, int]] = []
  read = 0
  for number, line in input_files.read_record_lines(path):
    # Bad UTF-8 stays in its own record (reported as undecodable_text).
    content = line.decode("utf-8", errors="surrogateescape")
    content = content[:-1] if content.endswith("\n") else content
    if not content.strip():
      continue
    read += 1
    stats.examples_read += 1
    try:
      try:
        raw = json.loads(content)
      except json.JSONDecodeError as e:
        raise input_errors.BadRecordError(path, f"line {number}", "<record>",
                                          NOT_JSON, str(e)) from e
      candidates.append(validate_record(raw, path, number - 1, labeled))
    except input_errors.BadRecordError as e:
      stats.handle_bad_record(e)
  if not read:
    raise input_errors.InputFileError(f"{path}: input file holds no records")
  return _dedup(candidates, path, stats, labeled)


def _dedup(candidates: Iterable[Tuple[OpenKPRecord, int]], path: str,
           stats: record_stats.RecordStats,
           labeled: bool) -> List[OpenKPRecord]:
  """One record per URL (see the module docstring), in order of first use."""
  by_url: Dict[str, List[Tuple[OpenKPRecord, int]]] = collections.OrderedDict()
  for record, num_valid in candidates:
    by_url.setdefault(record.url, []).append((record, num_valid))
  kept = []
  for url, group in by_url.items():
    if labeled:
      best = min(group, key=lambda rn: (-rn[1], rn[0].line))[0]
    else:
      best = group[0][0]
    for record, _ in group:
      if record is best:
        continue
      stats.handle_bad_record(input_errors.BadRecordError(
          path, url, "url", DUPLICATE_URL,
          f"line {record.line + 1} repeats the url; kept line "
          f"{best.line + 1}"))
    kept.append(best)
    # Not `add_truncation`: examples_truncated counts truncated documents.
    stats.truncation["keyphrases_dropped"] += best.num_keyphrases_dropped
  kept.sort(key=lambda r: r.line)
  return kept
