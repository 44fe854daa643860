"""The WikiHop demo's bridge scaffold (`--bridge_scaffold`): marks that fade.

docs/wikihop_demo.md, "The bridge scaffold (--bridge_scaffold)". A tiny ETC
trained from scratch on the demo's two-document chains (village -> city in
one document, city -> country in another) must match the bridge city across
documents, and at initialisation no attention path carries a signal for it.
The released checkpoints start fine-tuning with such paths in place from
pre-training; the demo has none, and with its defaults (short fact sentences,
the query's subject typed, the initialisation priors, Adam epsilon 1e-8) it
learns the chain without help. The scaffold stays as an option for
experiments where that step does not start alone. With the featurizer's
`mark_query_subject` (the query's village typed 2 in the documents, at
training and at serving alike), training batches at first also type the
bridge city's two document mentions 2, the very mark the rest of the chain
already reads, and then stop doing so for a growing fraction of the examples.
Once the marks are gone the model must find the bridge itself; evaluation,
prediction and serving never see them.

How: `WikiHopBridgeScaffoldTask` (registered as "wikihop_bridge_scaffold";
choose it with `task_class.cls = @WikiHopBridgeScaffoldTask`) is the WikiHop
task whose model (`ScaffoldedWikiHopModel`) applies `BridgeMarks` in `call`
when `training=True`. The schedule counts training calls in a variable the
model owns (`training_calls`): it is saved in every checkpoint, so a resumed
run continues the schedule where it stopped. A training call is one forward
pass in training mode: one optimizer step without gradient accumulation,
`grad_accum_steps` calls per step with it.

The bridge is found from the synthetic templates ("<village> is near
<city>." / "<village> lies by <city>."): the wordpiece just before the final
period of the sentence holding the query subject's first mention. It is for
`demos.wikihop.synthetic` data, not for the released WikiHop.
"""

from typing import Dict, Optional

import tensorflow as tf

from etc_realformer.errors import UserInputError
from etc_realformer.training import task as task_lib
from tasks.wikihop import features as wikihop_features
from tasks.wikihop import head
from tasks.wikihop import task as wikihop_task

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


class BridgeMarks:
  """Types bridge mentions as the subject's, on a fading schedule.

  Every example is marked for `hold_steps` training calls; then each example
  is marked with a probability that falls linearly over `fade_steps` to
  `floor` and stays there. A floor above 0 keeps the path from the mark to
  the answer trained while the unmarked examples push the model to find the
  bridge from content. The draw is a function of (seed, step), so a resumed
  run marks the same examples.
  """

  def __init__(self, period_id: int, hold_steps: int = 300,
               fade_steps: int = 1000, floor: float = 0.0, seed: int = 0):
    if hold_steps < 0 or fade_steps < 0:
      raise UserInputError(f"hold_steps and fade_steps must not be "
                           f"negative, got {hold_steps}, {fade_steps}")
    if not 0.0 <= floor <= 1.0:
      raise UserInputError(f"floor must be in [0, 1], got {floor}")
    self.period_id = int(period_id)
    self.hold_steps = hold_steps
    self.fade_steps = fade_steps
    self.floor = float(floor)
    self.seed = seed

  def mark_probability(self, step: tf.Tensor) -> tf.Tensor:
    return fade(step, self.hold_steps, self.fade_steps, self.floor)

  def __call__(self, features: Dict[str, tf.Tensor], step: tf.Tensor
               ) -> Dict[str, tf.Tensor]:
    """`features` with the chosen examples' bridge mentions typed 2."""
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


class ScaffoldedWikiHopModel(head.WikiHopModel):
  """The WikiHop model that applies `marks` to its training inputs."""

  def __init__(self, encoder, side_inputs_fn, marks: BridgeMarks, **kwargs):
    super().__init__(encoder, side_inputs_fn, **kwargs)
    self.marks = marks
    # Checkpointed with the model: a resumed run continues the schedule.
    # One replica's count stands for all (they make the same calls).
    self.training_calls = tf.Variable(
        0, dtype=tf.int64, trainable=False, name="training_calls",
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

  def call(self, features: task_lib.Features,
           training: Optional[bool] = None) -> Dict[str, tf.Tensor]:
    if training:
      features = self.marks(features, self.training_calls)
      self.training_calls.assign_add(1)
    return super().call(features, training=training)


@task_lib.register_task("wikihop_bridge_scaffold")
class WikiHopBridgeScaffoldTask(wikihop_task.WikiHopTask):
  """The WikiHop task with the bridge scaffold in training (see the module
  docstring). The `WikiHopTask` settings apply as they are bound; the data
  must be featurized with `mark_query_subject` and `vocab_file` must hold
  "."."""

  def __init__(self, hold_steps: int = 300, fade_steps: int = 1000,
               floor: float = 0.0, scaffold_seed: int = 0, **kwargs):
    """Scaffold settings (`BridgeMarks`), then `WikiHopTask`'s.

    Args:
      hold_steps: training calls with every example marked.
      fade_steps: training calls over which the marked fraction falls.
      floor: the fraction that stays marked after the fade.
      scaffold_seed: the marks' draw seed.
      **kwargs: `WikiHopTask` arguments.
    """
    super().__init__(**kwargs)
    self.hold_steps = hold_steps
    self.fade_steps = fade_steps
    self.floor = floor
    self.scaffold_seed = scaffold_seed

  def build_marks(self) -> BridgeMarks:
    """The marks of this task's settings ("." from its vocabulary)."""
    period_id = self.featurizer.tokenizer.token_id(".")
    if period_id is None:
      raise UserInputError(f"{self.vocab_file or self.spm_model_file}: no "
                           "'.' in the vocabulary (the bridge scaffold "
                           "finds the bridge before a sentence's period)")
    return BridgeMarks(period_id, self.hold_steps, self.fade_steps,
                       self.floor, self.scaffold_seed)

  def build_model(self) -> ScaffoldedWikiHopModel:
    return ScaffoldedWikiHopModel(
        self.build_encoder(), self.side_inputs, self.build_marks(),
        initializer_range=self.model_config.initializer_range,
        name="wikihop_model")
