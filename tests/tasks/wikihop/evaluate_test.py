"""Tests for tasks.wikihop.evaluate: accuracy over the gold records, the gold
reader and the CLI."""

import json

import pytest

import cli_testing
from tasks.common.inputs import input_errors
from tasks.wikihop import evaluate as E

GOLD = [{"id": "1", "query": "q", "candidates": ["Paris", "oslo"],
         "answer": "Paris ", "supports": ["s"]},
        {"id": "2", "answer": "oslo"},
        {"id": "3", "answer": "lima"}]
PREDICTIONS = {"1": "paris", "2": "rome", "4": "x"}


def test_evaluate_counts_missing_predictions_as_wrong():
  gold = {"1": "paris", "2": "oslo", "3": "lima"}
  assert E.evaluate(PREDICTIONS, gold) == {
      "accuracy": pytest.approx(1 / 3), "num_correct": 1, "num_gold": 3,
      "num_predicted": 2}
  assert E.evaluate({}, {})["accuracy"] == 0.0


def test_gold_answers_normalized_and_bad_records_named(tmp_path):
  path = tmp_path / "dev.json"
  path.write_text(json.dumps(GOLD))
  assert E.gold_answers(str(path)) == {"1": "paris", "2": "oslo",
                                       "3": "lima"}
  path.write_text(json.dumps([{"id": "9"}]))
  with pytest.raises(input_errors.BadRecordError,
                     match=r"dev.json: record '9', field 'answer'"):
    E.gold_answers(str(path))


def test_cli(tmp_path):
  pred, gold = cli_testing.prediction_and_gold(tmp_path, PREDICTIONS,
                                             GOLD)
  out = cli_testing.output_here("tasks.wikihop.evaluate",
                                [str(pred), str(gold)])
  assert json.loads(out) == E.evaluate_files(str(pred), str(gold))
  # A user's mistake (here a gold file that is not JSON) is one line and
  # exit code 2.
  gold.write_text("[")
  cli_testing.user_error_line("tasks.wikihop.evaluate", [str(pred), str(gold)],
                              "gold.json: not valid JSON")
  cli_testing.user_error_line_here("tasks.wikihop.evaluate", [str(pred)],
                                   "usage: ")


def test_repeated_ids_and_empty_files_are_refused(tmp_path):
  gold = tmp_path / "gold.json"
  gold.write_text(json.dumps([GOLD[0], GOLD[1], dict(GOLD[0], answer="x")]))
  with pytest.raises(input_errors.DuplicateIdError,
                     match=r"gold.json: id '1' is duplicated: record #0 and "
                     r"record #2; ids must be unique$"):
    E.gold_answers(str(gold))
  gold.write_text("[]")
  with pytest.raises(input_errors.InputFileError, match="gold.json: gold file "
                     "holds no records"):
    E.gold_answers(str(gold))
  pred = tmp_path / "pred.json"
  pred.write_text('{"1": "paris", "2": "oslo", "1": "rome"}')
  gold.write_text(json.dumps(GOLD))
  # The binary: one line naming the file and the key.
  cli_testing.user_error_line_here(
      "tasks.wikihop.evaluate", [str(pred), str(gold)],
      f"{pred}: key '1' is duplicated: entries #0 and #2")
  pred.write_text("{}")
  with pytest.raises(input_errors.InputFileError, match="holds no predictions"):
    E.load_predictions(str(pred))
