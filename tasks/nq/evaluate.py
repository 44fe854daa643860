r"""The official Natural Questions scorer (PyPI `natural-questions` 1.0.6,
`natural_questions.nq_eval`), called as a library.

  python -m tasks.nq.evaluate --gold_path='nq-dev-0?.jsonl.gz' \
      --predictions_path=predictions.json [--long_non_null_threshold=2]

Gold: the five-way annotated files in the original download format (gzipped
JSON lines; a glob or comma-separated globs; `gs://` paths through
`tf.io.gfile`). Predictions: the official JSON `{"predictions": [...]}` (see
`tasks/nq/decode.py`).

The scoring is the official code's (`eval_utils.read_annotation_from_one_split`,
`read_prediction_json`, `nq_eval.score_answers`,
`get_metrics_with_answer_stats`, `compute_final_f1`); this module only

* reads the gold files one after the other in this process (the official
  `read_annotation` forks a process pool, which is unsafe once TensorFlow's
  threads run);
* makes the absl flags the scorer reads while scoring
  (`long_non_null_threshold`, `short_non_null_threshold`, both 2: gold has a
  long / short answer when at least 2 annotators gave one) usable from a
  process that never parsed flags (pytest, a notebook, the trainer): they
  are then marked parsed, i.e. take their defaults;
* scores a gold example without a prediction as a null prediction (the
  official script refuses the whole file instead; `allow_missing=False`
  restores that) and reports how many there were.

Reported (`score`): long / short best-threshold F1, precision, recall and
threshold (the official search: every prediction scored at or above the
threshold counts, the rest count as null), the R@P table, and the F1 / P / R
ignoring scores (`compute_final_f1`).
"""

import json
import tempfile
from typing import Any, Dict, List

from absl import flags
import tensorflow as tf

from etc_realformer import cli
from etc_realformer.errors import UserInputError
from tasks.common.inputs import input_errors
from tasks.common.inputs import json_files
from tasks.common.inputs import record_checks

NULL_SPAN = (-1, -1, -1, -1)
# The report's headline numbers (`summary`): the rest is the official
# metric dict and the scores ignoring the thresholds.
SUMMARY_KEYS = (
    "long_f1", "long_precision", "long_recall", "long_threshold", "short_f1",
    "short_precision", "short_recall", "short_threshold", "num_gold",
    "num_predicted", "num_missing", "gold_with_long_answer",
    "gold_with_short_answer")


def _official():
  """The official modules; their absl flags made readable (see the doc).

  Imported here, not at the top: importing them defines absl flags
  (--gold_path, --predictions_path, --num_threads, ...), which must not land
  in every binary that imports the NQ task.
  """
  # pylint: disable=g-import-not-at-top
  from natural_questions import eval_utils
  from natural_questions import nq_eval
  # pylint: enable=g-import-not-at-top
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  return eval_utils, nq_eval


def gold_files(gold_path: str) -> List[str]:
  """Files matched by a glob or comma-separated globs (sorted, unique)."""
  files = []
  for pattern in gold_path.split(","):
    pattern = pattern.strip()
    if not pattern:
      continue
    matched = tf.io.gfile.glob(pattern)
    if not matched:
      raise FileNotFoundError(f"NQ gold: no file matches {pattern!r}")
    files.extend(sorted(matched))
  return sorted(set(files))


def read_gold(gold_path: str) -> Dict[int, list]:
  """example_id -> the annotations (`eval_utils.NQLabel`s) of every file.

  Raises:
    UserInputError: a file is not an NQ gold file or holds no example, or
      an example id is in two files (a `input_errors.DuplicateIdError`).
  """
  eval_utils, _ = _official()
  gold = {}
  first_file: Dict[int, str] = {}
  for path in gold_files(gold_path):
    if tf.io.gfile.isdir(path):
      raise input_errors.InputFileError(f"{path}: is a directory, not an NQ "
                                        "gold file")
    with tf.io.gfile.GFile(path, "rb") as f:
      try:
        annotations = eval_utils.read_annotation_from_one_split(f)
      except (OSError, EOFError, ValueError, KeyError, TypeError,
              tf.errors.OpError) as e:
        raise UserInputError(f"{path}: not an NQ gold file (gzipped JSON "
                             f"lines with annotations): {e!r}") from e
    if not annotations:
      raise input_errors.InputFileError(f"{path}: gold file holds no examples")
    for example_id in annotations:
      if example_id in first_file:
        raise input_errors.DuplicateIdError(
            f"{path}: example_id {example_id!r} is duplicated: in "
            f"{first_file[example_id]} and in {path}; ids must be unique")
      first_file[example_id] = path
    gold.update(annotations)
  return gold


def gold_answer_counts(gold: Dict[int, list]) -> Dict[str, int]:
  """How many gold examples count as answered (the official 2-of-5 rule)."""
  eval_utils, _ = _official()
  return {
      "gold_with_long_answer": sum(
          bool(eval_utils.gold_has_long_answer(labels))
          for labels in gold.values()),
      "gold_with_short_answer": sum(
          bool(eval_utils.gold_has_short_answer(labels))
          for labels in gold.values()),
  }


def score_dicts(gold: Dict[int, list], predictions: Dict[int, Any],
                allow_missing: bool = True,
                gold_name: str = "") -> Dict[str, Any]:
  """Official metrics from parsed gold and predictions (`NQLabel` dicts).

  Raises:
    UserInputError: a predicted example id is not in the gold, or (without
      `allow_missing`) a gold example has no prediction; the message names
      `gold_name` (the gold files).
  """
  eval_utils, nq_eval = _official()
  where = f"the gold {gold_name}".rstrip()
  extra = set(predictions) - set(gold)
  if extra:
    raise UserInputError(f"{len(extra)} predicted example ids are not in "
                         f"{where}, e.g. {sorted(extra)[:3]}")
  missing = set(gold) - set(predictions)
  if missing and not allow_missing:
    raise UserInputError(f"{len(missing)} example ids of {where} have no "
                         f"prediction, e.g. {sorted(missing)[:3]}")
  predictions = dict(predictions)
  for example_id in missing:
    predictions[example_id] = eval_utils.NQLabel(
        example_id=example_id,
        long_answer_span=eval_utils.Span(*NULL_SPAN),
        short_answer_span_list=[], yes_no_answer="none",
        long_score=float("-inf"), short_score=float("-inf"))
  long_stats, short_stats = nq_eval.score_answers(gold, predictions)
  metrics = nq_eval.get_metrics_with_answer_stats(long_stats, short_stats)
  ignoring_scores = nq_eval.compute_final_f1(long_stats, short_stats)
  report = {
      "long_f1": metrics["long-best-threshold-f1"],
      "long_precision": metrics["long-best-threshold-precision"],
      "long_recall": metrics["long-best-threshold-recall"],
      "long_threshold": metrics["long-best-threshold"],
      "short_f1": metrics["short-best-threshold-f1"],
      "short_precision": metrics["short-best-threshold-precision"],
      "short_recall": metrics["short-best-threshold-recall"],
      "short_threshold": metrics["short-best-threshold"],
      "num_gold": len(gold),
      "num_predicted": len(predictions) - len(missing),
      "num_missing": len(missing),
      **gold_answer_counts(gold),
      "official": dict(metrics),
      "ignoring_scores": dict(ignoring_scores),
  }
  return _finite(report)


def score(gold_path: str, predictions_path: str,
          allow_missing: bool = True) -> Dict[str, Any]:
  """Official NQ metrics of a predictions JSON file against gold files.

  Args:
    gold_path: gold `nq-dev-*.jsonl.gz` glob(s), comma-separated allowed.
    predictions_path: the official predictions JSON.
    allow_missing: score gold examples without a prediction as null ones
      (False: fail, as the official script).

  Returns:
    long_f1 / long_precision / long_recall / long_threshold, the same for
    short, num_gold, num_predicted, num_missing, gold_with_long_answer,
    gold_with_short_answer, "official" (the scorer's whole metric dict) and
    "ignoring_scores" (its F1 / P / R without a threshold).
  """
  return score_predictions(gold_path, json_files.load_json(predictions_path),
                           allow_missing, predictions_name=predictions_path)


def parse_predictions(submission: Dict[str, Any],
                      name: str = "predictions") -> Dict[int, Any]:
  """The official reader's view (`read_prediction_json`) of an in-memory
  predictions object (it only reads files: a temporary one).

  Raises:
    UserInputError: not the official format, no prediction, or an example
      id predicted twice (the message names `name`).
  """
  eval_utils, _ = _official()
  entries = submission.get("predictions") if isinstance(
      submission, dict) else None
  if isinstance(entries, list):
    if not entries:
      raise input_errors.InputFileError(f"{name}: holds no predictions")
    ids = record_checks.UniqueIds(name, field="example_id", hint="")
    for index, entry in enumerate(entries):
      if isinstance(entry, dict) and "example_id" in entry:
        ids.check(entry["example_id"], f"predictions[{index}]")
  with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
    json.dump(submission, f)
    f.flush()
    try:
      return eval_utils.read_prediction_json(f.name)
    except (KeyError, TypeError, ValueError) as e:
      raise UserInputError(f"{name}: not in the official NQ predictions "
                           f"format: {e!r}") from e


def score_predictions(gold_path: str, predictions: Dict[str, Any],
                      allow_missing: bool = True,
                      predictions_name: str = "predictions"
                      ) -> Dict[str, Any]:
  """`score` for an in-memory predictions object."""
  return score_dicts(read_gold(gold_path),
                     parse_predictions(predictions, predictions_name),
                     allow_missing=allow_missing, gold_name=gold_path)


def summary(report: Dict[str, Any]) -> Dict[str, Any]:
  """The headline numbers of a report (`SUMMARY_KEYS`)."""
  return {k: report[k] for k in SUMMARY_KEYS}


def _finite(value):
  """-inf / inf / nan (thresholds of null predictions) -> None, for JSON."""
  if isinstance(value, float) and (value != value or value in (
      float("inf"), float("-inf"))):
    return None
  if isinstance(value, dict):
    return {k: _finite(v) for k, v in value.items()}
  return value


def summary_line(report: Dict[str, Any]) -> str:
  return (f"nq official | long F1/P/R {report['long_f1']:.4f}/"
          f"{report['long_precision']:.4f}/{report['long_recall']:.4f} | "
          f"short F1/P/R {report['short_f1']:.4f}/"
          f"{report['short_precision']:.4f}/{report['short_recall']:.4f} | "
          f"{report['num_gold']} gold, {report['num_missing']} missing")


def main(argv: List[str]) -> None:
  """CLI: the official flags (`--gold_path`, `--predictions_path`, the
  non-null thresholds) and `--allow_missing`."""
  if len(argv) > 1:
    raise UserInputError(f"unexpected arguments: {argv[1:]}")
  f = flags.FLAGS
  if not f.gold_path or not f.predictions_path:
    raise UserInputError("--gold_path and --predictions_path are required")
  report = score(f.gold_path, f.predictions_path,
                 allow_missing=f.allow_missing)
  print(summary_line(report))
  print(json.dumps(report, indent=1, sort_keys=True))


def define_flags() -> None:
  """The official scorer's flags (defined by importing it) and
  --allow_missing; only when run as a binary."""
  _official()
  flags.DEFINE_bool("allow_missing", True,
                    "Score gold examples without a prediction as null.")


if __name__ == "__main__":
  define_flags()
  cli.run(main)
