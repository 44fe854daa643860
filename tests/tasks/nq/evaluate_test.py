"""The official NQ scorer wrapper (`tasks.nq.evaluate`) on hand-made files.

Gold (five annotators each, the official rule: answered when >= 2 gave one):
  1: all five long [10, 20); three short [12, 14)      -> long yes, short yes
  2: two of five long [30, 40), both with yes_no YES   -> long yes, short yes
  3: one of five long [5, 8)                           -> long no, short no
  4: nothing                                           -> long no, short no
"""

import gzip
import json
import subprocess
import sys

import pytest

import cli_testing
import e2e_testing
from etc_realformer.errors import UserInputError
from tasks.nq import evaluate as E

NULL = {"start_byte": -1, "end_byte": -1, "start_token": -1, "end_token": -1}


def span(start, end):
  # Byte offsets a multiple of the tokens (the scorer prefers bytes).
  return {"start_byte": 7 * start, "end_byte": 7 * end,
          "start_token": start, "end_token": end}


def annotation(long=None, short=(), yes_no="NONE"):
  return {"long_answer": {**(span(*long) if long else NULL),
                          "candidate_index": 0 if long else -1},
          "short_answers": [span(*s) for s in short],
          "yes_no_answer": yes_no, "annotation_id": 0}


GOLD = [
    {"example_id": 1, "annotations": (
        [annotation((10, 20), [(12, 14)])] * 3 +
        [annotation((10, 20))] * 2)},
    {"example_id": 2, "annotations": (
        [annotation((30, 40), yes_no="YES")] * 2 + [annotation()] * 3)},
    {"example_id": 3, "annotations": (
        [annotation((5, 8), [(6, 7)])] + [annotation()] * 4)},
    {"example_id": 4, "annotations": [annotation()] * 5},
]


def prediction(example_id, long=None, long_score=0.0, short=(),
               short_score=0.0, yes_no="NONE", bytes_too=False):
  def tok(s):
    out = span(*s)
    if not bytes_too:
      out.update(start_byte=-1, end_byte=-1)
    return out
  return {"example_id": example_id,
          "long_answer": tok(long) if long else dict(NULL),
          "long_answer_score": long_score,
          "short_answers": [tok(s) for s in short],
          "short_answers_score": short_score,
          "yes_no_answer": yes_no}


PERFECT = [
    prediction(1, (10, 20), 1.0, [(12, 14)], 1.0),
    prediction(2, (30, 40), 1.0, [], 1.0, yes_no="YES", bytes_too=True),
    prediction(3),
    prediction(4),
]


@pytest.fixture()
def gold_path(tmp_path):
  """Two gold shards (the scorer takes a glob)."""
  for shard, records in enumerate((GOLD[:2], GOLD[2:])):
    with gzip.open(tmp_path / f"nq-dev-0{shard}.jsonl.gz", "wt") as f:
      for record in records:
        f.write(json.dumps(record) + "\n")
  return str(tmp_path / "nq-dev-0?.jsonl.gz")


def write_predictions(tmp_path, predictions, name="predictions.json"):
  path = str(tmp_path / name)
  with open(path, "w") as f:
    json.dump({"predictions": predictions}, f)
  return path


def test_perfect_predictions_score_one(tmp_path, gold_path):
  report = E.score(gold_path, write_predictions(tmp_path, PERFECT))
  assert report["num_gold"] == 4 and report["num_missing"] == 0
  # The 2-of-5 rule: examples 1 and 2 are answered, 3 (one of five) is not.
  assert report["gold_with_long_answer"] == 2
  assert report["gold_with_short_answer"] == 2
  for kind in ("long", "short"):
    assert report[f"{kind}_f1"] == 1.0
    assert report[f"{kind}_precision"] == 1.0
    assert report[f"{kind}_recall"] == 1.0
  assert report["official"]["long-best-threshold-f1"] == 1.0


def test_wrong_answers_lower_f1_as_hand_computed(tmp_path, gold_path):
  predictions = [
      # Wrong long answer with the highest score; right short answer.
      prediction(1, (0, 5), 2.0, [(12, 14)], 1.0),
      # Right long answer; yes/no wrong (NO) with the highest short score.
      prediction(2, (30, 40), 1.0, [], 3.0, yes_no="NO"),
      # The one annotator's long answer: gold is null (1 < 2), so a false
      # positive however exact.
      prediction(3, (5, 8), 0.5, [(6, 7)], 0.5),
      prediction(4),
  ]
  report = E.score(gold_path, write_predictions(tmp_path, predictions))
  # Long, by score: 1 (wrong, 2.0), 2 (right, 1.0), 3 (false pos, 0.5), 4.
  # Threshold 2.0: P 0/1; 1.0: P 1/2 R 1/2 F1 .5; 0.5: P 1/3 R 1/2 F1 .4.
  assert report["long_f1"] == pytest.approx(0.5)
  assert report["long_precision"] == pytest.approx(0.5)
  assert report["long_recall"] == pytest.approx(0.5)
  assert report["long_threshold"] == pytest.approx(1.0)
  # Ignoring the scores: 1 right of 3 predicted, of 2 gold.
  assert report["ignoring_scores"]["long-answer-precision"] == pytest.approx(
      1 / 3)
  assert report["ignoring_scores"]["long-answer-f1"] == pytest.approx(0.4)
  # Short, by score: 2 (wrong yes/no, 3.0), 1 (right, 1.0), 3 (false pos).
  assert report["short_f1"] == pytest.approx(0.5)
  assert report["short_threshold"] == pytest.approx(1.0)


def test_two_of_five_rule_counts_two_not_one(tmp_path, gold_path):
  """Example 2's long answer (2 of 5) is gold; example 3's (1 of 5) is not."""
  only_2 = [prediction(1), prediction(2, (30, 40), 1.0), prediction(3),
            prediction(4)]
  report = E.score(gold_path, write_predictions(tmp_path, only_2))
  # 1 right of 1 predicted, 2 gold: P 1, R 1/2.
  assert report["long_precision"] == 1.0
  assert report["long_recall"] == pytest.approx(0.5)
  only_3 = [prediction(1), prediction(2), prediction(3, (5, 8), 1.0),
            prediction(4)]
  report = E.score(gold_path, write_predictions(tmp_path, only_3))
  assert report["long_f1"] == 0.0  # exact, yet gold says null


def test_missing_predictions_are_null_or_an_error(tmp_path, gold_path):
  path = write_predictions(tmp_path, PERFECT[:2])
  report = E.score(gold_path, path)
  assert report["num_missing"] == 2 and report["num_predicted"] == 2
  assert report["long_f1"] == 1.0  # 3 and 4 should be null anyway
  with pytest.raises(UserInputError, match="no prediction"):
    E.score(gold_path, path, allow_missing=False)
  extra = write_predictions(tmp_path, PERFECT + [prediction(99)], "x.json")
  with pytest.raises(UserInputError, match="not in the gold"):
    E.score(gold_path, extra)
  with pytest.raises(FileNotFoundError):
    E.score(str(tmp_path / "nope-*.jsonl.gz"), path)


def test_in_memory_predictions_and_the_summary(gold_path):
  report = E.score_predictions(gold_path, {"predictions": PERFECT})
  assert report["long_f1"] == report["short_f1"] == 1.0
  json.dumps(report)  # JSON-safe (no inf / nan)
  summary = E.summary(report)
  assert set(summary) == set(E.SUMMARY_KEYS)
  assert "official" not in summary and summary["num_gold"] == 4


def test_malformed_predictions_name_their_source(gold_path):
  with pytest.raises(UserInputError, match="mine.json: not in the official"):
    E.score_predictions(gold_path, {"predictions": [{"example_id": 1}]},
                        predictions_name="mine.json")


def test_library_call_in_a_process_without_parsed_flags(tmp_path, gold_path):
  """No absl app.run in the caller: the scorer's flags take their defaults."""
  path = write_predictions(tmp_path, PERFECT)
  script = ("import json\nfrom absl import flags\n"
            "from tasks.nq import evaluate\n"
            "assert not flags.FLAGS.is_parsed()\n"
            f"r = evaluate.score({gold_path!r}, {path!r})\n"
            "print('RESULT', json.dumps([r['long_f1'], r['short_f1'], "
            "r['gold_with_long_answer']]))\n")
  proc = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path),
                        env=e2e_testing.env(), capture_output=True, text=True,
                        timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert json.loads(proc.stdout.split("RESULT ", 1)[1]) == [1.0, 1.0, 2]


def test_cli_and_the_official_threshold_flags(tmp_path, gold_path):
  only_3 = write_predictions(tmp_path, [
      prediction(1), prediction(2), prediction(3, (5, 8), 1.0),
      prediction(4)])

  def cli(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "tasks.nq.evaluate", f"--gold_path={gold_path}",
         f"--predictions_path={only_3}", *args], cwd=e2e_testing.REPO,
        env=e2e_testing.env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("nq official | long F1/P/R ")
    return json.loads(proc.stdout.split("\n", 1)[1])

  assert cli()["long_f1"] == 0.0
  # With one annotator enough, example 3's long answer is gold (and right).
  report = cli("--long_non_null_threshold=1")
  assert report["gold_with_long_answer"] == 3
  assert report["long_precision"] == 1.0
  assert report["long_recall"] == pytest.approx(1 / 3)


def test_cli_missing_gold_is_one_line_and_exit_code_2(tmp_path):
  predictions = write_predictions(tmp_path, PERFECT)
  # In this process: test_cli_and_the_official_threshold_flags starts one.
  cli_testing.user_error_line_here(
      "tasks.nq.evaluate", [f"--gold_path={tmp_path}/nope-*.jsonl.gz",
                            f"--predictions_path={predictions}"],
      "nope-*.jsonl.gz")


def test_repeated_and_missing_examples_are_refused(tmp_path, gold_path):
  with pytest.raises(UserInputError,
                     match=r"mine.json: example_id 1 is duplicated: "
                     r"predictions\[0\] and predictions\[4\]"):
    E.score_predictions(gold_path, {"predictions": PERFECT + PERFECT[:1]},
                        predictions_name="mine.json")
  with pytest.raises(UserInputError, match="mine.json: holds no predictions"):
    E.score_predictions(gold_path, {"predictions": []},
                        predictions_name="mine.json")
  # The same example in two gold files.
  with gzip.open(tmp_path / "nq-dev-02.jsonl.gz", "wt") as f:
    f.write(json.dumps(GOLD[0]) + "\n")
  with pytest.raises(UserInputError,
                     match=r"nq-dev-02.jsonl.gz: example_id 1 is duplicated: "
                     r"in .*nq-dev-00.jsonl.gz and in"):
    E.read_gold(gold_path)
  with gzip.open(tmp_path / "nq-dev-02.jsonl.gz", "wt") as f:
    f.write("")
  with pytest.raises(UserInputError,
                     match="nq-dev-02.jsonl.gz: gold file holds no examples"):
    E.read_gold(gold_path)
