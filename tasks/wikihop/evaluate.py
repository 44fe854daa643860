r"""The official WikiHop metric: accuracy of `{id: answer}` predictions.

  python -m tasks.wikihop.evaluate PREDICTIONS.json GOLD.json

Predictions are the submission format `{id: answer}` (what `--mode=predict`
writes); gold is a qangaroo file (`dev.json`: records with `id` and
`answer`). Answers are compared after `data.normalize_candidate`
(`strip().lower()`), as candidates are. The accuracy is over ALL gold
records: a record without a prediction counts as wrong. A gold file that
holds no record or repeats an id, and a submission that is empty or repeats
an id, are refused (one line naming the file, the id and both records).
"""

from typing import Any, Dict, Mapping

from etc_realformer import cli
from tasks.common.command_line import scoring
from tasks.common.inputs import input_errors
from tasks.common.inputs import json_files
from tasks.common.inputs import record_checks
from tasks.wikihop import data


def evaluate(predictions: Mapping[str, str],
             gold: Mapping[str, str]) -> Dict[str, Any]:
  """Accuracy of `predictions` against `gold` (both `{id: answer}`).

  Returns:
    {"accuracy": correct / number of gold records (0 when none),
     "num_correct", "num_gold", "num_predicted" (of the gold ids)}.
  """
  correct = sum(
      1 for record_id, answer in gold.items()
      if record_id in predictions and data.normalize_candidate(
          predictions[record_id]) == data.normalize_candidate(answer))
  return {"accuracy": correct / len(gold) if gold else 0.0,
          "num_correct": correct, "num_gold": len(gold),
          "num_predicted": sum(1 for i in gold if i in predictions)}


def gold_answers(path: str) -> Dict[str, str]:
  """`{id: normalized answer}` of a qangaroo file.

  Raises:
    input_errors.InputFileError: the file is missing, empty, not a JSON array or
      holds no record; a `input_errors.DuplicateIdError` for an id given twice.
    input_errors.BadRecordError: a record without a usable `id` or `answer`.
  """
  gold = {}
  ids = record_checks.UniqueIds(path, hint="")
  raws = json_files.load_json_array(path)
  if not raws:
    raise input_errors.InputFileError(f"{path}: gold file holds no records")
  for index, raw in enumerate(raws):
    record_id = record_checks.record_id_of(raw, index)
    if not isinstance(raw, dict):
      raise input_errors.BadRecordError(path, record_id, "<record>",
                                        input_errors.WRONG_TYPE,
                                        "expected a JSON object")
    for field in ("id", "answer"):
      if field not in raw:
        raise input_errors.BadRecordError(path, record_id, field,
                                          input_errors.MISSING_FIELD)
      record_checks.check_text(raw[field], path, record_id, field)
    ids.check(raw["id"], f"record #{index}")
    gold[raw["id"]] = data.normalize_candidate(raw["answer"])
  return gold


def load_predictions(path: str) -> Dict[str, str]:
  """A submission file `{id: answer}`.

  Raises:
    input_errors.InputFileError: the file is missing, not JSON, not an object
      of strings, or empty; a `input_errors.DuplicateIdError` for an id given
      twice.
  """
  value = json_files.load_json(path, unique_keys=True)
  if not isinstance(value, dict) or not all(
      isinstance(v, str) for v in value.values()):
    raise input_errors.InputFileError(
        f"{path}: expected a JSON object {{id: answer}} of strings")
  if not value:
    raise input_errors.InputFileError(f"{path}: predictions file holds no "
                                      "predictions")
  return value


def evaluate_files(prediction_file: str, gold_file: str) -> Dict[str, Any]:
  return evaluate(load_predictions(prediction_file), gold_answers(gold_file))


if __name__ == "__main__":
  cli.run(scoring.scoring_main(
      "python -m tasks.wikihop.evaluate PREDICTIONS.json GOLD.json",
      evaluate_files))
