"""WikiHop model outputs -> answers: the chosen candidate's text.

The head's `prediction` is a global index, which is the candidate's index
(the candidates come first in the global input), so the answer is that entry
of the record's normalized `candidates`.
"""

from typing import Dict, Sequence

import tensorflow as tf


def chosen_candidate(candidates: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
  """The candidate at `index`; "" where `index` is -1 (no label / answer).

  Args:
    candidates: <string>[..., C] candidate texts.
    index: <int32>[...] an index into the last axis, or -1.
  """
  chosen = tf.gather(candidates, tf.maximum(index, 0),
                     batch_dims=index.shape.rank)
  return tf.where(index >= 0, chosen, tf.constant(""))


def by_id(example_ids: Sequence[bytes], answers: Sequence[bytes]
          ) -> Dict[str, str]:
  """`{id: answer}` (the official submission format) from a predicted set's
  byte strings, e.g. `prediction_outputs`' "example_id" and "answer"."""
  return {i.decode("utf-8"): a.decode("utf-8")
          for i, a in zip(example_ids, answers)}
