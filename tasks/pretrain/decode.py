"""Pre-training outputs -> readable predictions: the wordpieces the MLM head
predicted at the masked positions, next to the true ones.

`PretrainTask.write_predictions` adds `samples(...)` of the first examples
to its report when the task knows its vocabulary (`vocab_file`), which is
the quickest way to see what a model has learned.
"""

from typing import Any, Dict, List, Mapping, Sequence

import numpy as np


def pieces(vocab: Sequence[str], ids: Sequence[int]) -> List[str]:
  """The vocabulary entries of `ids` ("<id>" for ids outside it)."""
  return [vocab[i] if 0 <= i < len(vocab) else f"<{i}>" for i in ids]


def samples(predictions: Mapping[str, np.ndarray], vocab: Sequence[str],
            num_examples: int = 5) -> List[Dict[str, Any]]:
  """The first examples' masked positions: true and predicted pieces.

  Args:
    predictions: `prediction_outputs` over a set (`masked_lm_positions`,
      `masked_lm_ids`, `mlm_predictions`, `masked_lm_weights` [N, P]).
    vocab: the vocabulary, id order.
    num_examples: how many examples.

  Returns:
    One dict per example: `positions`, `true` and `predicted` pieces.
  """
  out = []
  weights = np.asarray(predictions["masked_lm_weights"])
  for i in range(min(num_examples, weights.shape[0])):
    keep = weights[i] > 0
    out.append({
        "positions": np.asarray(
            predictions["masked_lm_positions"][i])[keep].tolist(),
        "true": pieces(vocab, np.asarray(
            predictions["masked_lm_ids"][i])[keep].tolist()),
        "predicted": pieces(vocab, np.asarray(
            predictions["mlm_predictions"][i])[keep].tolist()),
    })
  return out
