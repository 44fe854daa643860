"""The pre-training scores of held-out data, with the baselines that say
whether the model learned anything.

From the per-example outputs of `PretrainTask.prediction_outputs` gathered
over the eval set (`scores`):

* `mlm_accuracy`: top-1 accuracy over the masked positions (each masked
  wordpiece counts once), and `mlm_most_frequent_baseline`: the accuracy
  of always predicting the training corpus's most frequent wordpiece
  (`most_frequent_wordpiece` of the preprocessing stats) on the same
  positions.
* `cpc_accuracy`: top-1 accuracy of picking a masked sentence's own target
  among all CPC sentences of its evaluation batch; `cpc_chance`: the mean of
  1 / (number of candidates) over the same queries (a uniform guess); and
  `cpc_length_baseline`: the expected accuracy of picking, at random among
  ties, a candidate whose length equals the masked sentence's (a fully
  masked sentence shows its length: the number of [MASK] tokens), i.e. the
  mean of 1 / (candidates of that length).
* What the CPC accuracy is made of: `cpc_same_length_rate`, the share of
  the model's picks that have the masked sentence's length, and
  `cpc_accuracy_within_length`, its accuracy when only the candidates of
  that length compete (what the context adds to the length; chance there
  is `cpc_length_baseline`). A model that reads the length alone scores a
  same-length rate near 1 and a within-length accuracy near the baseline.

`python -m tasks.pretrain --mode=eval` prints them (`eval official | ...`)
and writes them to `pretrain_eval.json` (`write_scores`).
"""

from typing import Any, Dict, Mapping, Optional

import numpy as np

from tasks.common import output_files

SCORES_FILE = "pretrain_eval.json"


def _weighted_mean(values: np.ndarray, weights: np.ndarray) -> float:
  total = float(np.sum(weights))
  return float(np.sum(values * weights) / total) if total else 0.0


def scores(predictions: Mapping[str, np.ndarray],
           most_frequent_token_id: Optional[int] = None) -> Dict[str, Any]:
  """MLM and CPC accuracy and their baselines (see the module docstring).

  Args:
    predictions: `prediction_outputs` over the eval set: `mlm_correct`,
      `masked_lm_ids`, `masked_lm_weights` [N, P]; `cpc_correct`,
      `cpc_weights`, `cpc_length_baseline` [N, C] (and, optionally,
      `cpc_same_length_pick`, `cpc_correct_within_length` [N, C]);
      `cpc_chance` [N].
    most_frequent_token_id: the training corpus's most frequent wordpiece;
      None leaves the MLM baseline out.

  Returns:
    A JSON-able dict (accuracies in [0, 1], counts).
  """
  mlm_w = np.asarray(predictions["masked_lm_weights"], np.float64)
  cpc_w = np.asarray(predictions["cpc_weights"], np.float64)
  chance = np.broadcast_to(
      np.asarray(predictions["cpc_chance"], np.float64)[:, np.newaxis],
      cpc_w.shape)
  out: Dict[str, Any] = {
      "mlm_accuracy": _weighted_mean(predictions["mlm_correct"], mlm_w),
      "mlm_most_frequent_baseline": None,
      "mlm_predictions": int(np.sum(mlm_w)),
      "cpc_accuracy": _weighted_mean(predictions["cpc_correct"], cpc_w),
      "cpc_chance": _weighted_mean(chance, cpc_w),
      "cpc_length_baseline": _weighted_mean(
          predictions["cpc_length_baseline"], cpc_w),
      "cpc_sentences": int(np.sum(cpc_w)),
      "examples": int(mlm_w.shape[0]),
  }
  for key, name in (("cpc_same_length_pick", "cpc_same_length_rate"),
                    ("cpc_correct_within_length",
                     "cpc_accuracy_within_length")):
    if key in predictions:
      out[name] = _weighted_mean(predictions[key], cpc_w)
  if most_frequent_token_id is not None:
    out["most_frequent_token_id"] = int(most_frequent_token_id)
    out["mlm_most_frequent_baseline"] = _weighted_mean(
        np.asarray(predictions["masked_lm_ids"]) == most_frequent_token_id,
        mlm_w)
  return out


def write_scores(path: str, values: Mapping[str, Any]) -> None:
  output_files.write_json(path, dict(values))
