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
from tasks.common import records
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
    records.InputFileError: the file is missing, empty, not a JSON array or
      holds no record; a `records.DuplicateIdError` for an id given twice.
    records.BadRecordError: a record without a usable `id` or `answer`.
  """
  gold = {}
  ids = records.UniqueIds(path, hint="")
  raws = records.load_json_array(path)
  if not raws:
    raise records.InputFileError(f"{path}: gold file holds no records")
  for index, raw in enumerate(raws):
    record_id = records.record_id_of(raw, index)
    if not isinstance(raw, dict):
      raise records.BadRecordError(path, record_id, "<record>",
                                   records.WRONG_TYPE,
                                   "expected a JSON object")
    for field in ("id", "answer"):
      if field not in raw:
        raise records.BadRecordError(path, record_id, field,
                                     records.MISSING_FIELD)
      records.check_text(raw[field], path, record_id, field)
    ids.check(raw["id"], f"record #{index}")
    gold[raw["id"]] = data.normalize_candidate(raw["answer"])
  return gold


def load_predictions(path: str) -> Dict[str, str]:
  """A submission file `{id: answer}`.

  Raises:
    records.InputFileError: the file is missing, not JSON, not an object
      of strings, or empty; a `records.DuplicateIdError` for an id given
      twice.
  """
  value = records.load_json(path, unique_keys=True)
  if not isinstance(value, dict) or not all(
      isinstance(v, str) for v in value.values()):
    raise records.InputFileError(
        f"{path}: expected a JSON object {{id: answer}} of strings")
  if not value:
    raise records.InputFileError(f"{path}: predictions file holds no "
                                 "predictions")
  return value


def evaluate_files(prediction_file: str, gold_file: str) -> Dict[str, Any]:
  return evaluate(load_predictions(prediction_file), gold_answers(gold_file))


if __name__ == "__main__":
  cli.run(records.scoring_main(
      "python -m tasks.wikihop.evaluate PREDICTIONS.json GOLD.json",
      evaluate_files))
