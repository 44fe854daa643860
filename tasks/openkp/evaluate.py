r"""The official OpenKP evaluation: P/R/F1 at 1, 3 and 5, averaged per document.

  python -m tasks.openkp.evaluate --reference=OpenKPDev.jsonl \
      --predictions=predictions.jsonl [--output=metrics.json]

Both files are jsonl with `url` and `KeyPhrases` (a list of keyphrases, each
a list of strings). As the official MS MARCO OpenKP `evaluate.py`:

- a keyphrase is its strings lower-cased and joined by spaces (right
  stripped); keyphrases whose first string is empty are dropped;
- the reference is the set of its keyphrases; predictions are taken in order
  with repeats dropped (after normalization, so "Foo" then "foo" count once:
  the first occurrence keeps its rank, later ones are removed before the
  cut at k);
- at depth k: true positives tp = the first k de-duplicated predictions that
  are in the reference; P@k = tp / k (not / the number predicted),
  R@k = tp / |ref|, F1@k = 2PR / (P + R) (0 when P + R = 0);
- each score is averaged over the reference documents.

Beyond the official script (which would fail): a reference document without
a prediction scores 0 (counted as `missing_predictions`), a reference
document with no keyphrase is left out (counted as `empty_references`).
A file that holds no document, or gives one url two different KeyPhrases
lists, is refused (one line naming the file, the url and both lines); a
url repeated with the same KeyPhrases is the same document (the released
files repeat some urls, which the original's preprocessing de-duplicates).
"""

import json
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from absl import flags
import numpy as np
import tensorflow as tf

from etc_realformer import cli
from etc_realformer.errors import UserInputError
from tasks.common import output_files
from tasks.common.inputs import input_errors

DEPTHS = (1, 3, 5)
METRIC_NAMES: Tuple[str, ...] = tuple(
    f"{m}@{k}" for m in ("precision", "recall", "f1") for k in DEPTHS)


def normalize_keyphrase(items: Sequence[str]) -> str:
  """The official normalization of one keyphrase (a list of strings)."""
  return " ".join(item.lower() for item in items).rstrip()


def normalize_keyphrases(keyphrases: Sequence[Any]) -> List[str]:
  """Official `remove_empty`: normalized keyphrases, empty ones dropped.

  A keyphrase given as a plain string is treated as a one-item list.
  """
  out = []
  for kp in keyphrases:
    items = [kp] if isinstance(kp, str) else list(kp)
    if items and items[0]:
      out.append(normalize_keyphrase(items))
  return out


def unique_in_order(keyphrases: Sequence[str]) -> List[str]:
  """The first occurrence of each keyphrase, in order (official `dedup`)."""
  return list(dict.fromkeys(keyphrases))


def score_document(predicted: Sequence[str], reference: Sequence[str],
                   max_depth: int = 5) -> Tuple[List[float], List[float],
                                                List[float]]:
  """P@k, R@k, F1@k for k = 1..max_depth of one document.

  Args:
    predicted: normalized predictions, best first; a repeat is dropped
      before ranking, so it neither scores twice nor takes a rank.
    reference: normalized gold keyphrases (non-empty).
  """
  predicted = unique_in_order(predicted)
  reference_set = set(reference)
  precision, recall, f1 = [], [], []
  true_positive = 0
  for i in range(max_depth):
    if i < len(predicted) and predicted[i] in reference_set:
      true_positive += 1
    p = true_positive / (i + 1)
    r = true_positive / len(reference_set)
    precision.append(p)
    recall.append(r)
    f1.append(2 * p * r / (p + r) if p + r > 0 else 0.0)
  return precision, recall, f1


def evaluate(references: Mapping[str, Sequence[Any]],
             predictions: Mapping[str, Sequence[Any]]) -> Dict[str, float]:
  """Averaged official scores.

  Args:
    references: url -> gold KeyPhrases (released format).
    predictions: url -> predicted KeyPhrases, best first.

  Returns:
    `METRIC_NAMES` -> average, plus `num_documents`, `missing_predictions`,
    `empty_references`.
  """
  rows = []
  missing = empty = 0
  for url, gold in references.items():
    reference = normalize_keyphrases(gold)
    if not reference:
      empty += 1
      continue
    if url not in predictions:
      missing += 1
    predicted = normalize_keyphrases(predictions.get(url, []))
    p, r, f = score_document(predicted, reference, max(DEPTHS))
    rows.append([p[k - 1] for k in DEPTHS] + [r[k - 1] for k in DEPTHS] +
                [f[k - 1] for k in DEPTHS])
  means = np.mean(rows, axis=0) if rows else np.zeros(len(METRIC_NAMES))
  out = {name: float(v) for name, v in zip(METRIC_NAMES, means)}
  out.update(num_documents=len(rows), missing_predictions=missing,
             empty_references=empty)
  return out


def read_keyphrases(path: str) -> Dict[str, List[Any]]:
  """url -> KeyPhrases from a jsonl file (a line without KeyPhrases has
  none).

  Raises:
    UserInputError: a line is not a JSON object with a string `url` (the
      message names the file and line), the file is a directory or holds
      no document, or a url repeats with other KeyPhrases (a
      `input_errors.DuplicateIdError`); FileNotFoundError: no file.
  """
  out: Dict[str, List[Any]] = {}
  first_line: Dict[str, int] = {}
  if tf.io.gfile.isdir(path):
    raise input_errors.InputFileError(
        f"{path}: is a directory, not a jsonl file")
  with tf.io.gfile.GFile(path, "r") as f:
    for number, line in enumerate(_lines(f, path), 1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise UserInputError(f"{path}: line {number}: not valid JSON: "
                             f"{e}") from e
      if not isinstance(record, dict) or not isinstance(record.get("url"),
                                                        str):
        raise UserInputError(f"{path}: line {number}, field 'url': "
                             "expected an object with a string url")
      keyphrases = record.get("KeyPhrases") or []
      if not isinstance(keyphrases, list):
        raise UserInputError(f"{path}: line {number}, field 'KeyPhrases': "
                             "expected a list of keyphrases")
      url = record["url"]
      if url in out and out[url] != keyphrases:
        raise input_errors.DuplicateIdError(
            f"{path}: url {url!r} is duplicated with different KeyPhrases: "
            f"line {first_line[url]} and line {number}; urls must be unique")
      first_line.setdefault(url, number)
      out.setdefault(url, keyphrases)
  if not out:
    raise input_errors.InputFileError(f"{path}: holds no documents")
  return out


def _lines(f: Any, path: str):
  """The text lines of an open file; bytes that are not UTF-8 are one line
  naming the file."""
  try:
    yield from f
  except UnicodeDecodeError as e:
    raise input_errors.InputFileError(
        f"{path}: not UTF-8 text") from e


def evaluate_files(reference_path: str, predictions_path: str
                   ) -> Dict[str, float]:
  return evaluate(read_keyphrases(reference_path),
                  read_keyphrases(predictions_path))


def main(argv):
  if len(argv) > 1:
    raise UserInputError(f"unexpected arguments: {argv[1:]}")
  f = flags.FLAGS
  for name in ("reference", "predictions"):
    if not f[name].value:
      raise UserInputError(f"--{name} is required")
  results = evaluate_files(f.reference, f.predictions)
  print(json.dumps(results, indent=2, sort_keys=True))
  if f.output:
    output_files.write_json(f.output, results, sort_keys=True)


def _define_flags():
  flags.DEFINE_string("reference", None, "Gold jsonl (OpenKPDev.jsonl).")
  flags.DEFINE_string("predictions", None, "Predicted jsonl.")
  flags.DEFINE_string("output", None, "Optional metrics JSON to write.")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
