"""A training scaffold for the synthetic WikiHop demo: bridge marks that fade.

Why it exists. A tiny ETC trained from scratch on the demo's two-document
chains (village -> city in one document, city -> country in another) stayed
at chance with the synthetic data's earlier, longer fact sentences:
following the chain needs the bridge city matched across documents, and no
attention path carried a signal for that at initialisation
(docs/wikihop_demo.md). Since session 8 (short fact sentences, a smaller
Adam epsilon) the default demo learns without it; it stays an option
(`python -m tasks.wikihop.demo --bridge_scaffold`). The released checkpoints
start fine-tuning with such paths in place from pre-training; the demo has
no pre-training, so it scaffolds instead. With the featurizer's
`mark_query_subject` (the query's village typed 2 in the documents, at
training and at serving alike), the training batches at first also type the
bridge city's two document mentions 2, the very mark the rest of the chain
already reads, and then stop doing so for a growing fraction of the
examples. Once the marks are gone the model must find the bridge itself;
evaluation, prediction and serving never see them.

The bridge is found from the synthetic templates ("<village> is near
<city>." / "<village> lies by <city>."): the wordpiece just before the final
period of the sentence holding the query subject's first mention. It is for
`tasks.wikihop.synthetic` data, not for the released WikiHop.
"""

from typing import Dict

import gin
import tensorflow as tf

from tasks.common import tokenization
from tasks.wikihop import features as wikihop_features

_SUBJECT = wikihop_features.QUERY_SUBJECT_TOKEN_TYPE_ID
_DOCUMENT = wikihop_features.SENTENCE_TOKEN_TYPE_ID


def fade(step: tf.Tensor, hold_steps: int, fade_steps: int,
         floor: float = 0.0) -> tf.Tensor:
  """float32 []: 1 up to `hold_steps`, then linearly down to `floor` over
  `fade_steps` (0 = at once), then `floor`."""
  step = tf.cast(step, tf.float32)
  down = tf.clip_by_value(
      1.0 - (step - hold_steps) / float(max(fade_steps, 1)), 0.0, 1.0)
  return floor + (1.0 - floor) * down


def bridge_mentions(token_ids: tf.Tensor, segment_ids: tf.Tensor,
                    long_sentence_ids: tf.Tensor, period_id: int
                    ) -> tf.Tensor:
  """<bool>[B, L]: document mentions of the bridge city (see the module
  docstring); all False in an example without a typed subject mention or
  whose subject sentence has no period.

  Args:
    token_ids, segment_ids, long_sentence_ids: <int32>[B, L] features of a
      featurizer with `mark_query_subject`.
    period_id: the wordpiece id of ".".
  """
  is_doc = (tf.equal(segment_ids, _DOCUMENT) |
            tf.equal(segment_ids, _SUBJECT))
  subject = tf.equal(segment_ids, _SUBJECT)
  first = tf.argmax(tf.cast(subject, tf.int32), axis=1, output_type=tf.int32)
  sentence = tf.gather(long_sentence_ids, first, batch_dims=1)
  period = (is_doc & tf.equal(long_sentence_ids, sentence[:, None]) &
            tf.equal(token_ids, period_id))
  end = tf.argmax(tf.cast(period, tf.int32), axis=1, output_type=tf.int32)
  city = tf.gather(token_ids, tf.maximum(end - 1, 0), batch_dims=1)
  found = tf.reduce_any(subject, axis=1) & tf.reduce_any(period, axis=1)
  return (is_doc & ~subject & tf.equal(token_ids, city[:, None]) &
          found[:, None])


@gin.configurable
class SyntheticBridgeScaffold:
  """`WikiHopTask.train_scaffold`: types bridge mentions as the subject's.

  Every example is marked for `hold_steps` optimizer steps; then each
  example is marked with a probability that falls linearly over
  `fade_steps` to `floor` and stays there. A floor above 0 keeps the path
  from the mark to the answer trained while the unmarked examples push the
  model to find the bridge from content. The draw is a function of (seed,
  step), so a resumed run marks the same examples.
  """

  def __init__(self, vocab_file: str, hold_steps: int = 300,
               fade_steps: int = 1000, floor: float = 0.0, seed: int = 0):
    if hold_steps < 0 or fade_steps < 0:
      raise ValueError(f"hold_steps and fade_steps must not be negative, "
                       f"got {hold_steps}, {fade_steps}")
    if not 0.0 <= floor <= 1.0:
      raise ValueError(f"floor must be in [0, 1], got {floor}")
    tokenizer = tokenization.make_tokenizer(vocab_file, None)
    period = tokenizer.tokenize(tf.constant(["."])).flat_values.numpy()
    if len(period) != 1:
      raise ValueError(f"{vocab_file}: '.' is not one wordpiece")
    self.period_id = int(period[0])
    self.hold_steps = hold_steps
    self.fade_steps = fade_steps
    self.floor = float(floor)
    self.seed = seed

  def mark_probability(self, step: tf.Tensor) -> tf.Tensor:
    return fade(step, self.hold_steps, self.fade_steps, self.floor)

  def __call__(self, features: Dict[str, tf.Tensor], step: tf.Tensor
               ) -> Dict[str, tf.Tensor]:
    segment_ids = features["segment_ids"]
    bridge = bridge_mentions(features["token_ids"], segment_ids,
                             features["long_sentence_ids"], self.period_id)
    draw = tf.random.stateless_uniform(
        tf.shape(segment_ids)[:1],
        seed=tf.stack([tf.constant(self.seed, tf.int64),
                       tf.cast(step, tf.int64)]))
    chosen = draw < self.mark_probability(step)
    mark = bridge & chosen[:, None]
    return {**features,
            "segment_ids": tf.where(mark, tf.cast(_SUBJECT, segment_ids.dtype),
                                    segment_ids)}
