"""The official HotpotQA metric on hand-computed cases, one per rule."""

import json

import pytest

import cli_testing
from tasks.common.inputs import input_errors
from tasks.hotpotqa import evaluate as E


@pytest.mark.parametrize("text, normal", [
    ("The  Eiffel-Tower, Paris!", "eiffeltower paris"),  # punct, articles
    ("An apple a day", "apple day"),  # every article, case
    ("theatre", "theatre"),  # articles only as whole words
    ("  New\tYork\n", "new york"),  # whitespace collapsed
    ("U.S.A.", "usa"),
    ("Café", "café"),  # non-ASCII kept, lower-cased
])
def test_normalize_answer(text, normal):
  assert E.normalize_answer(text) == normal


@pytest.mark.parametrize("prediction, gold, expected", [
    # Partial overlap: precision 1/2, recall 1, F1 2/3.
    ("Paris France", "paris", (0.0, 2 / 3, 0.5, 1.0)),
    ("the cat sat", "a cat", (0.0, 2 / 3, 0.5, 1.0)),
    # Bag of words with repeats: overlap min(2, 1) = 1.
    ("x x y", "x z", (0.0, 0.4, 1 / 3, 0.5)),
    ("Yes.", "yes", (1.0, 1.0, 1.0, 1.0)),
    ("noanswer", "noanswer", (1.0, 1.0, 1.0, 1.0)),
    # yes / no / noanswer on either side: no partial credit.
    ("yes", "no", (0.0, 0.0, 0.0, 0.0)),
    ("yes", "yes sir", (0.0, 0.0, 0.0, 0.0)),
    ("no way", "no", (0.0, 0.0, 0.0, 0.0)),
    ("noanswer", "the noanswer", (1.0, 1.0, 1.0, 1.0)),  # same normal form
    ("noanswer", "noanswer here", (0.0, 0.0, 0.0, 0.0)),
    ("", "paris", (0.0, 0.0, 0.0, 0.0)),
    # Both normalise to "": EM 1 but F1 0 (no words), as the official script.
    ("the", "a", (1.0, 0.0, 0.0, 0.0)),
])
def test_answer_scores(prediction, gold, expected):
  assert E.answer_scores(prediction, gold) == pytest.approx(expected)


@pytest.mark.parametrize("prediction, gold, expected", [
    # Sets: the duplicate counts once. tp 1, fp 1, fn 1.
    ([["A", 0], ["A", 0], ["B", 1]], [["A", 0], ["C", 2]],
     (0.0, 0.5, 0.5, 0.5)),
    ([["A", 0], ["B", 1]], [["B", 1], ["A", 0]], (1.0, 1.0, 1.0, 1.0)),
    ([], [["A", 0]], (0.0, 0.0, 0.0, 0.0)),
    ([["A", 0]], [], (0.0, 0.0, 0.0, 0.0)),
    ([], [], (1.0, 0.0, 0.0, 0.0)),  # EM by fp + fn == 0; F1 undefined -> 0
    ([["A", 1]], [["A", 0]], (0.0, 0.0, 0.0, 0.0)),  # sentence id matters
])
def test_sp_scores(prediction, gold, expected):
  assert E.sp_scores(prediction, gold) == pytest.approx(expected)


GOLD = [
    {"_id": "1", "answer": "paris", "supporting_facts": [["A", 0], ["C", 2]]},
    {"_id": "2", "answer": "x", "supporting_facts": [["A", 0]]},
    {"_id": "3", "answer": "yes", "supporting_facts": [["B", 0]]},
]
PREDICTION = {
    # "2" has no answer, "3" no sp: neither adds to the joint metrics.
    "answer": {"1": "Paris France", "3": "yes"},
    "sp": {"1": [["A", 0], ["B", 1]], "2": [["A", 0]]},
}


def test_evaluate_averages_over_gold_with_missing_entries():
  metrics = E.evaluate(PREDICTION, GOLD)
  # Record 1: answer (0, 2/3, 1/2, 1); sp (0, 1/2, 1/2, 1/2); joint precision
  # 1/4, recall 1/2, F1 = 2 * 1/8 / (3/4) = 1/3.
  expected = {
      "em": 1 / 3, "f1": (2 / 3 + 1) / 3, "prec": 1.5 / 3, "recall": 2 / 3,
      "sp_em": 1 / 3, "sp_f1": 1.5 / 3, "sp_prec": 1.5 / 3,
      "sp_recall": 1.5 / 3,
      "joint_em": 0.0, "joint_f1": (1 / 3) / 3, "joint_prec": 0.25 / 3,
      "joint_recall": 0.5 / 3,
  }
  assert set(metrics) == set(E.METRIC_NAMES)
  for name, value in expected.items():
    assert metrics[name] == pytest.approx(value), name


def test_joint_em_needs_both():
  gold = [{"_id": "1", "answer": "Paris", "supporting_facts": [["A", 0]]}]
  perfect = {"answer": {"1": "the paris"}, "sp": {"1": [["A", 0]]}}
  assert E.evaluate(perfect, gold)["joint_em"] == 1.0
  assert E.evaluate(perfect, gold)["joint_f1"] == 1.0
  wrong_sp = {"answer": {"1": "paris"}, "sp": {"1": [["A", 0], ["A", 1]]}}
  metrics = E.evaluate(wrong_sp, gold)
  assert metrics["joint_em"] == 0.0
  # joint precision 1 * 1/2, recall 1 * 1 -> F1 2/3.
  assert metrics["joint_f1"] == pytest.approx(2 / 3)


def test_answer_type_counts():
  gold = [{"_id": "1", "answer": "yes"}, {"_id": "2", "answer": "no"},
          {"_id": "3", "answer": "Paris"}, {"_id": "4", "answer": "Rome"},
          {"_id": "5", "answer": "Oslo"}]
  prediction = {"answer": {"1": "no", "2": "", "3": "paris", "4": "Milan",
                           "5": "yes"}}
  assert E.answer_type_counts(prediction, gold) == {
      "A_A": 1, "A_B": 1, "A_Y": 1, "N_E": 1, "Y_N": 1}


def test_evaluate_files_names_the_bad_file(tmp_path):
  pred, gold = cli_testing.prediction_and_gold(tmp_path, PREDICTION,
                                             [{"_id": "1", "answer": "x"}])
  with pytest.raises(input_errors.BadRecordError,
                     match="gold.json: record '1', field 'supporting_facts'"):
    E.evaluate_files(str(pred), str(gold))
  pred.write_text(json.dumps({"answer": []}))
  with pytest.raises(input_errors.InputFileError, match="pred.json: expected"):
    E.evaluate_files(str(pred), str(gold))


def test_cli(tmp_path):
  pred, gold = cli_testing.prediction_and_gold(tmp_path, PREDICTION,
                                             GOLD)
  out = cli_testing.output_here("tasks.hotpotqa.evaluate",
                                [str(pred), str(gold)])
  assert json.loads(out) == pytest.approx(E.evaluate(PREDICTION, GOLD))
  # A user's mistake (a missing gold file) is one line and exit code 2.
  cli_testing.user_error_line("tasks.hotpotqa.evaluate",
                              [str(pred), str(tmp_path / "none.json")],
                              "none.json: cannot read input file")


def test_repeated_ids_and_empty_files_are_refused(tmp_path):
  pred, gold = cli_testing.prediction_and_gold(tmp_path, PREDICTION,
                                             [GOLD[0], GOLD[1], GOLD[0]])
  with pytest.raises(input_errors.DuplicateIdError,
                     match=rf"gold.json: _id '{GOLD[0]['_id']}' is "
                     r"duplicated: record #0 and record #2"):
    E.evaluate_files(str(pred), str(gold))
  gold.write_text("[]")
  with pytest.raises(input_errors.InputFileError, match="gold.json: gold file "
                     "holds no records"):
    E.evaluate_files(str(pred), str(gold))
  pred.write_text('{"answer": {"a": "x", "a": "y"}, "sp": {}}')
  with pytest.raises(input_errors.DuplicateIdError,
                     match="pred.json: key 'a' is duplicated"):
    E.evaluate_files(str(pred), str(gold))
  pred.write_text('{"answer": {}, "sp": {}}')
  with pytest.raises(input_errors.InputFileError, match="holds no predictions"):
    E.evaluate_files(str(pred), str(gold))
