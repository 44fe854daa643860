"""The Natural Questions model: the encoder over each window, then

- four position heads over the long tokens, one Dense(4) on the long output
  (as the original): long-answer start / end and short-answer start / end
  logits, masked to the document's positions and [CLS] (position 0, "no
  answer"), as the original's `mask_long_output`;
- a 5-way answer type (null / yes / no / long / short, `data.ANSWER_TYPES`)
  from position 0: the global [CLS] token by default
  (`answer_type_source='global'`); `'long'` reads the long [CLS] token, as the
  original did;
- outside training, the per-window decoding (`decode.window_answers`): the
  best whole candidate and the best short span inside it.
"""

import tensorflow as tf
import tf_keras

from etc_realformer.errors import UserInputError
from etc_realformer.training import task as task_lib
from tasks.nq import data
from tasks.nq import decode
from tasks.nq import features as features_lib

GLOBAL, LONG = "global", "long"
ANSWER_TYPE_SOURCES = (GLOBAL, LONG)
POSITION_HEADS = ("long_start", "long_end", "short_start", "short_end")


def check_settings(answer_type_source: str, score_mode: str) -> None:
  """Raises UserInputError for an unknown answer type source or score
  mode."""
  if answer_type_source not in ANSWER_TYPE_SOURCES:
    raise UserInputError(f"answer_type_source must be {GLOBAL!r} or "
                         f"{LONG!r}, got {answer_type_source!r}")
  if score_mode not in decode.SCORE_MODES:
    raise UserInputError(f"score_mode must be one of {decode.SCORE_MODES}, "
                         f"got {score_mode!r}")


class NqModel(task_lib.EtcTaskModel):
  """Encoder + the four position heads, the answer type head, decoding."""

  def __init__(self, encoder, side_inputs_fn, initializer_range: float = 0.02,
               answer_type_source: str = GLOBAL,
               max_short_answer_length: int = 32,
               score_mode: str = decode.DIFFERENCE, **kwargs):
    super().__init__(encoder, side_inputs_fn, **kwargs)
    check_settings(answer_type_source, score_mode)
    self.answer_type_source = answer_type_source
    self.max_short_answer_length = int(max_short_answer_length)
    self.score_mode = score_mode

    def dense(units, name):
      return tf_keras.layers.Dense(
          units, kernel_initializer=tf_keras.initializers.TruncatedNormal(
              stddev=initializer_range), name=name)

    self.position_layer = dense(4, "positions")
    self.answer_type_layer = dense(len(data.ANSWER_TYPES), "answer_type")

  def head(self, features, long_output, global_output, training=None):
    """float32 outputs: `<head>_logits` [B, L] for the four POSITION_HEADS,
    answer_type_logits / _probs [B, 5], answer_type [B]; outside training
    also the per-window decoding (`decode.WINDOW_OUTPUTS`, [B] each)."""
    f32 = tf.float32
    logits = tf.cast(self.position_layer(long_output), f32)  # [B, L, 4]
    dmap = features[features_lib.DOC_TOKEN_MAP]
    outputs = {f"{name}_logits": decode.mask_long_logits(logits[..., i], dmap)
               for i, name in enumerate(POSITION_HEADS)}
    cls = (global_output if self.answer_type_source == GLOBAL
           else long_output)[:, 0]
    type_logits = tf.cast(self.answer_type_layer(cls), f32)
    outputs.update(
        answer_type_logits=type_logits,
        answer_type_probs=tf.nn.softmax(type_logits, axis=-1),
        answer_type=tf.argmax(type_logits, axis=-1, output_type=tf.int32))
    if not training:
      outputs.update(decode.window_answers(
          *(outputs[f"{name}_logits"] for name in POSITION_HEADS), features,
          max_short_answer_length=self.max_short_answer_length,
          score_mode=self.score_mode))
    return outputs
