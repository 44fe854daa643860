"""TFDS and Natural Questions: what the TFDS builder lacks, and a checked path.

The TFDS `natural_questions` builder (0.1.0) keeps the document tokens (text
and `is_html` only), the question and the annotations, but DROPS what the
ETC NQ setup is built on:

* `long_answer_candidates` (start_token, end_token, top_level): only the
  tokens of top-level candidates are windowed, every top-level candidate gets
  a global token, and a long answer is predicted as a candidate;
* the candidates' `start_byte` / `end_byte` and the document tokens'
  `start_byte` / `end_byte`: the official scorer compares byte spans;
* `annotations.long_answer.candidate_index`.

Rebuilding candidates from the HTML would train and score on something other
than NQ's candidate set, so nothing here fabricates them:
`check_tfds_builder("natural_questions")` raises `TfdsFieldsMissingError`
naming the missing fields and what to download instead. A TFDS dataset that
does carry these fields (a future version, or your own builder over the
released files) is converted record by record with `records_from_tfds`,
validated like the released files, and preprocessed by
`python -m tasks.nq.preprocess --tfds=NAME:SPLIT`.
"""

from typing import Any, Dict, Iterable, Iterator, List, Optional

import numpy as np

from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.nq import data

# Dotted feature paths (TFDS / Hugging Face format) the NQ pipeline needs,
# with why.
REQUIRED_FIELDS: Dict[str, str] = {
    "id": "the example id",
    "question.text": "the question",
    "document.tokens.token": "the document tokens",
    "document.tokens.is_html": "HTML tags become special tokens",
    "document.tokens.start_byte": "byte spans of short answers (scorer)",
    "document.tokens.end_byte": "byte spans of short answers (scorer)",
    "long_answer_candidates.start_token": "candidate spans (windows, global "
                                          "tokens, long answers)",
    "long_answer_candidates.end_token": "candidate spans",
    "long_answer_candidates.top_level": "only top-level candidates are "
                                        "windowed and get a global token",
    "long_answer_candidates.start_byte": "byte spans of long answers "
                                         "(scorer)",
    "long_answer_candidates.end_byte": "byte spans of long answers (scorer)",
    "annotations.long_answer.start_token": "long answer labels",
    "annotations.long_answer.end_token": "long answer labels",
    "annotations.long_answer.candidate_index": "long answer = a candidate",
    "annotations.short_answers.start_token": "short answer labels",
    "annotations.short_answers.end_token": "short answer labels",
    "annotations.yes_no_answer": "yes/no labels",
}

DOWNLOAD_INSTRUCTIONS = """\
Use the released NQ files instead (they have every field): download
  gs://natural_questions/v1.0/train/nq-train-??.jsonl.gz  (50 files, ~40 GB)
  gs://natural_questions/v1.0/dev/nq-dev-??.jsonl.gz      (5 files, ~1 GB)
(`gsutil -m cp -R gs://natural_questions/v1.0 DIR`, or
https://ai.google.com/research/NaturalQuestions/download) and run
  python -m tasks.nq.preprocess --input='DIR/v1.0/train/nq-train-??.jsonl.gz' \\
      --vocab=vocab.txt --output_dir=OUT
The simplified training file (gs://natural_questions/v1.0-simplified/
simplified-nq-train.jsonl.gz) has the candidates with top_level but no byte
offsets; it is fine for training, while scoring needs the full dev files."""


class TfdsFieldsMissingError(input_errors.InputFileError):
  """A TFDS dataset lacks fields the NQ pipeline needs (see the message)."""

  def __init__(self, name: str, missing: List[str]):
    self.name = name
    self.missing = list(missing)
    lines = "\n".join(f"  {m}: {REQUIRED_FIELDS[m]}" for m in missing)
    super().__init__(
        f"TFDS dataset {name!r} cannot be used for ETC NQ: it lacks\n{lines}\n"
        f"(the TFDS natural_questions builder drops the long-answer "
        f"candidates and the byte offsets; candidates are not rebuilt from "
        f"HTML here, that would not be NQ's candidate set).\n"
        f"{DOWNLOAD_INSTRUCTIONS}")


def feature_paths(features: Any, prefix: str = "") -> List[str]:
  """Dotted leaf paths of a TFDS `FeaturesDict` (or nested dicts)."""
  # Sequence(...) wraps its inner feature in `.feature`.
  inner = getattr(features, "feature", None)
  if inner is not None and not isinstance(features, dict):
    return feature_paths(inner, prefix)
  items = None
  if isinstance(features, dict):
    items = features.items()
  elif hasattr(features, "items") and callable(features.items):
    items = features.items()
  if items is None:
    return [prefix] if prefix else []
  out = []
  for key, value in items:
    out.extend(feature_paths(value, f"{prefix}.{key}" if prefix else key))
  return out


def missing_fields(paths: Iterable[str]) -> List[str]:
  """The `REQUIRED_FIELDS` not among `paths` (in the order of the former)."""
  have = set(paths)
  return [f for f in REQUIRED_FIELDS if f not in have]


def check_features(features: Any, name: str = "natural_questions") -> None:
  """Raises `TfdsFieldsMissingError` unless every required field is there."""
  missing = missing_fields(feature_paths(features))
  if missing:
    raise TfdsFieldsMissingError(name, missing)


def check_tfds_builder(name: str = "natural_questions",
                       data_dir: Optional[str] = None):
  """The TFDS builder for `name` once its features pass `check_features`
  (nothing is downloaded to check)."""
  # Imported here: TFDS takes seconds to import, and the rest of this module
  # (the checks and the conversion) works on plain dicts without it.
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  builder = tfds.builder(name, data_dir=data_dir)
  check_features(builder.info.features, builder.info.full_name)
  return builder


def _text(value: Any) -> str:
  if isinstance(value, (bytes, np.bytes_)):
    return value.decode("utf-8", errors="surrogateescape")
  return str(value)


def _ints(values: Any) -> List[int]:
  return [int(v) for v in np.asarray(values).reshape(-1)]


def _spans(group: Dict[str, Any], with_candidate: bool = False
           ) -> List[Dict[str, int]]:
  out = []
  starts = _ints(group["start_token"])
  for i, start in enumerate(starts):
    span = dict(start_token=start, end_token=_ints(group["end_token"])[i],
                start_byte=_ints(group["start_byte"])[i],
                end_byte=_ints(group["end_byte"])[i])
    if with_candidate:
      span["candidate_index"] = _ints(group["candidate_index"])[i]
    out.append(span)
  return out


def tfds_example_to_json(example: Dict[str, Any]) -> Dict[str, Any]:
  """A numpy TFDS example (with every `REQUIRED_FIELDS`) in the released
  JSON form. `yes_no_answer` is the TFDS ClassLabel (0 NO, 1 YES, -1 none)
  or a string."""
  doc = example["document"]
  tokens = doc["tokens"]
  words = [_text(t) for t in np.asarray(tokens["token"]).reshape(-1)]
  is_html = [bool(h) for h in np.asarray(tokens["is_html"]).reshape(-1)]
  starts, ends = _ints(tokens["start_byte"]), _ints(tokens["end_byte"])
  cands = example["long_answer_candidates"]
  candidates = _spans(cands)
  for c, top in zip(candidates,
                    np.asarray(cands["top_level"]).reshape(-1)):
    c["top_level"] = bool(top)
  anns = example.get("annotations") or {}
  annotations = []
  if anns:
    longs = _spans(anns["long_answer"], with_candidate=True)
    shorts = anns["short_answers"]
    yes_no = np.asarray(anns["yes_no_answer"]).reshape(-1)
    for i, long_answer in enumerate(longs):
      # Short answers: one row of spans per annotation.
      row = {k: np.asarray(shorts[k][i]) for k in (
          "start_token", "end_token", "start_byte", "end_byte")}
      value = yes_no[i]
      if isinstance(value, (bytes, str, np.bytes_)):
        yn = _text(value)
      else:
        yn = {0: "NO", 1: "YES"}.get(int(value), "NONE")
      annotation = dict(long_answer=long_answer, short_answers=_spans(row),
                        yes_no_answer=yn)
      if "id" in anns and _text(np.asarray(anns["id"])[i]).lstrip(
          "-").isdigit():
        annotation["annotation_id"] = int(_text(np.asarray(anns["id"])[i]))
      annotations.append(annotation)
  raw_id = example["id"]
  example_id = int(_text(raw_id)) if isinstance(
      raw_id, (bytes, str, np.bytes_)) else int(raw_id)
  return dict(
      example_id=example_id,
      question_text=_text(example["question"]["text"]),
      document_url=_text(doc.get("url", b"")),
      document_tokens=[dict(token=t, html_token=h, start_byte=s, end_byte=e)
                       for t, h, s, e in zip(words, is_html, starts, ends)],
      long_answer_candidates=candidates,
      annotations=annotations)


def records_from_tfds(examples: Iterable[Dict[str, Any]], name: str,
                      stats: Optional[record_stats.RecordStats] = None,
                      require_labels: bool = False
                      ) -> Iterator[data.NqRecord]:
  """Validated `NqRecord`s from numpy TFDS examples (`tfds.as_numpy`), with
  the bad-record policy of the file reader."""
  if stats is None:
    stats = record_stats.RecordStats(input_file=name)
  for index, example in enumerate(examples):
    stats.examples_read += 1
    try:
      try:
        raw = tfds_example_to_json(example)
      except (KeyError, ValueError, TypeError, IndexError) as e:
        raise input_errors.BadRecordError(name, f"#{index}", "<example>",
                                          input_errors.WRONG_TYPE,
                                          repr(e)[:200]) from e
      yield data.validate_record(raw, name, index + 1, require_labels)
    except input_errors.BadRecordError as e:
      stats.handle_bad_record(e)
