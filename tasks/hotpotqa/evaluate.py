r"""The official HotpotQA metric (`hotpot_evaluate_v1.py`), same numbers.

  python -m tasks.hotpotqa.evaluate PREDICTIONS.json GOLD.json

Predictions are the submission format `{"answer": {id: text}, "sp": {id:
[[title, sent_id], ...]}}`; gold is the released file (`_id`, `answer`,
`supporting_facts`). Per gold record:

- answer: both strings are normalised (lower-case, punctuation removed, the
  words a/an/the removed, whitespace collapsed). EM = equal normal forms. F1
  over the bag of words; but if either normal form is "yes", "no" or
  "noanswer" and they differ, F1 = precision = recall = 0.
- supporting facts: sets of (title, sent_id); precision / recall / F1 of the
  sets (0 when undefined); EM = 1 when the sets are equal.
- joint: precision = ans_prec x sp_prec, recall = ans_recall x sp_recall,
  F1 from those two, EM = ans_em x sp_em.

Every metric is averaged over ALL gold records: a record missing from the
predictions' "answer" (or "sp") adds 0 to the answer (sp) metrics and to the
joint metrics. A gold file that holds no record or repeats an `_id`, and a
submission that predicts nothing or repeats an id, are refused (one line
naming the file, the id and both records).
"""

import collections
import re
import string
from typing import Any, Dict, Iterable, Mapping, Sequence, Tuple

from etc_realformer import cli
from tasks.common.command_line import scoring
from tasks.common.inputs import input_errors
from tasks.common.inputs import json_files
from tasks.common.inputs import record_checks

METRIC_NAMES = ("em", "f1", "prec", "recall", "sp_em", "sp_f1", "sp_prec",
                "sp_recall", "joint_em", "joint_f1", "joint_prec",
                "joint_recall")
# Normal forms that only match themselves (no partial credit).
_CLOSED_ANSWERS = ("yes", "no", "noanswer")
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
  """lower -> drop ASCII punctuation -> articles to spaces -> split/join."""
  text = text.lower()
  text = "".join(ch for ch in text if ch not in _PUNCTUATION)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


def answer_scores(prediction: str, gold: str) -> Tuple[float, float, float,
                                                       float]:
  """(em, f1, precision, recall) of one predicted answer."""
  pred_norm, gold_norm = normalize_answer(prediction), normalize_answer(gold)
  em = float(pred_norm == gold_norm)
  if pred_norm != gold_norm and (pred_norm in _CLOSED_ANSWERS or
                                 gold_norm in _CLOSED_ANSWERS):
    return em, 0.0, 0.0, 0.0
  pred_words, gold_words = pred_norm.split(), gold_norm.split()
  overlap = sum((collections.Counter(pred_words) &
                 collections.Counter(gold_words)).values())
  if overlap == 0:
    return em, 0.0, 0.0, 0.0
  precision = overlap / len(pred_words)
  recall = overlap / len(gold_words)
  return em, 2 * precision * recall / (precision + recall), precision, recall


def sp_scores(prediction: Iterable[Sequence[Any]],
              gold: Iterable[Sequence[Any]]) -> Tuple[float, float, float,
                                                      float]:
  """(em, f1, precision, recall) of one predicted supporting-fact list."""
  pred_set = set(map(tuple, prediction))
  gold_set = set(map(tuple, gold))
  tp = len(pred_set & gold_set)
  fp = len(pred_set - gold_set)
  fn = len(gold_set - pred_set)
  precision = tp / (tp + fp) if tp + fp else 0.0
  recall = tp / (tp + fn) if tp + fn else 0.0
  f1 = (2 * precision * recall / (precision + recall)
        if precision + recall else 0.0)
  return float(fp + fn == 0), f1, precision, recall


def evaluate(prediction: Mapping[str, Mapping[str, Any]],
             gold: Sequence[Mapping[str, Any]]) -> Dict[str, float]:
  """The twelve official metrics (see the module docstring), in [0, 1]."""
  totals = dict.fromkeys(METRIC_NAMES, 0.0)
  answers = prediction.get("answer", {})
  sps = prediction.get("sp", {})
  for record in gold:
    record_id = record["_id"]
    ans = sp = None
    if record_id in answers:
      ans = answer_scores(answers[record_id], record["answer"])
      for name, value in zip(("em", "f1", "prec", "recall"), ans):
        totals[name] += value
    if record_id in sps:
      sp = sp_scores(sps[record_id], record["supporting_facts"])
      for name, value in zip(("sp_em", "sp_f1", "sp_prec", "sp_recall"), sp):
        totals[name] += value
    if ans is None or sp is None:
      continue
    joint_prec = ans[2] * sp[2]
    joint_recall = ans[3] * sp[3]
    totals["joint_em"] += ans[0] * sp[0]
    totals["joint_prec"] += joint_prec
    totals["joint_recall"] += joint_recall
    if joint_prec + joint_recall > 0:
      totals["joint_f1"] += (2 * joint_prec * joint_recall /
                             (joint_prec + joint_recall))
  count = len(gold)
  return {k: (v / count if count else 0.0) for k, v in totals.items()}


def evaluate_files(prediction_file: str, gold_file: str) -> Dict[str, float]:
  """`evaluate` of a submission file against a released file.

  Raises:
    input_errors.InputFileError: a file is missing or not JSON, the submission
      is not an object with "answer" / "sp" objects or predicts nothing,
      or the gold is not an array or holds no record; a
      `input_errors.DuplicateIdError` for an id given twice in either.
    input_errors.BadRecordError: a gold record lacks `_id`, `answer` or
      `supporting_facts`.
  """
  prediction = json_files.load_json(prediction_file, unique_keys=True)
  if not isinstance(prediction, dict) or not all(
      isinstance(prediction.get(k, {}), dict) for k in ("answer", "sp")):
    raise input_errors.InputFileError(
        f"{prediction_file}: expected a JSON object "
        '{"answer": {id: text}, "sp": {id: [[title, sent_id], ...]}}')
  if not prediction.get("answer") and not prediction.get("sp"):
    raise input_errors.InputFileError(f"{prediction_file}: predictions file "
                                      "holds no predictions")
  gold = json_files.load_json_array(gold_file)
  if not gold:
    raise input_errors.InputFileError(
        f"{gold_file}: gold file holds no records")
  ids = record_checks.UniqueIds(gold_file, field="_id", hint="")
  for index, record in enumerate(gold):
    for field in ("_id", "answer", "supporting_facts"):
      if not isinstance(record, dict) or field not in record:
        raise input_errors.BadRecordError(
            gold_file, record_checks.record_id_of(record, index, "_id"), field,
            input_errors.MISSING_FIELD)
    ids.check(record["_id"], f"record #{index}")
  return evaluate(prediction, gold)


def answer_type_counts(prediction: Mapping[str, Mapping[str, Any]],
                       gold: Sequence[Mapping[str, Any]]
                       ) -> Dict[str, int]:
  """Confusion counts by gold type (Y/N/A = yes/no/span) and predicted kind
  (Y, N, A = correct span, B = wrong span, E = empty), e.g. "A_B"."""
  counts: Dict[str, int] = collections.Counter()
  for record in gold:
    gold_norm = normalize_answer(record["answer"])
    pred_norm = normalize_answer(
        prediction.get("answer", {}).get(record["_id"], ""))
    row = {"yes": "Y", "no": "N"}.get(gold_norm, "A")
    if pred_norm in ("yes", "no"):
      col = pred_norm[0].upper()
    elif not pred_norm:
      col = "E"
    elif row == "A":
      col = "A" if pred_norm == gold_norm else "B"
    else:
      col = "A"
    counts[f"{row}_{col}"] += 1
  return dict(sorted(counts.items()))


if __name__ == "__main__":
  cli.run(scoring.scoring_main(
      "python -m tasks.hotpotqa.evaluate PREDICTIONS.json GOLD.json",
      evaluate_files))
