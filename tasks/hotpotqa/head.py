"""The HotpotQA model: the ETC-RealFormer encoder and the original's heads.

- supporting facts: one sigmoid logit per global token (Dense(1));
- answer type: a 3-way softmax (span / yes / no) on the CLS global token;
- span: start and end logits over the long tokens (Dense(2)); or, with
  `answer_encoding='bio'`, B/I/O logits per long token (Dense(3)).

The head also finds the best span inside each title / sentence and the text
holding the answer at `sp_threshold` (`decode.sentence_best_spans`,
`decode.select_answer`), so that the serving signatures return answers.
"""

import tensorflow as tf
import tf_keras

from etc_realformer.features import feature_names
from etc_realformer.training import task as task_lib
from tasks.common.featurization import logits as logits_lib
from tasks.hotpotqa import decode
from tasks.hotpotqa import features as features_lib

# Logit of padding long tokens.
NEG_INF = logits_lib.NEG_INF
SPAN, BIO = "span", "bio"


def long_input_mask(long_paragraph_breakpoints: tf.Tensor) -> tf.Tensor:
  """bool [B, L]: real (non-padding) long tokens = up to the last breakpoint."""
  after = tf.cumsum(long_paragraph_breakpoints, axis=-1, reverse=True)
  return after > 0


class HotpotQAModel(task_lib.EtcTaskModel):
  """Encoder + supporting-fact, answer-type and span heads."""

  def __init__(self, encoder, side_inputs_fn, initializer_range: float = 0.02,
               answer_encoding: str = SPAN, max_answer_length: int = 30,
               sp_threshold: float = 0.5, **kwargs):
    super().__init__(encoder, side_inputs_fn, **kwargs)
    if answer_encoding not in (SPAN, BIO):
      raise ValueError(f"answer_encoding must be {SPAN!r} or {BIO!r}, got "
                       f"{answer_encoding!r}")
    self.answer_encoding = answer_encoding
    self.max_answer_length = int(max_answer_length)
    self.sp_threshold = float(sp_threshold)

    def dense(units, name):
      return tf_keras.layers.Dense(
          units, kernel_initializer=tf_keras.initializers.TruncatedNormal(
              stddev=initializer_range), name=name)

    self.supporting_facts_layer = dense(1, "supporting_facts")
    self.answer_type_layer = dense(3, "answer_type")
    self.span_layer = dense(2 if answer_encoding == SPAN else 3,
                            "answer_span" if answer_encoding == SPAN
                            else "answer_bio")

  def head(self, features, long_output, global_output, training=None):
    """float32 outputs (B batch, L long, G global):

    sp_logits, sp_probs [B, G]; answer_type_logits, answer_type_probs [B, 3];
    answer_type [B]; start_logits, end_logits [B, L] (span) or bio_logits
    [B, L, 3] (bio); span_score, span_start, span_end, span_start_byte,
    span_end_byte [B, G] (best span per title / sentence, see
    `decode.sentence_best_spans`); answer_global [B] (the text holding the
    answer at `sp_threshold`, -1 for none).
    """
    del training
    f32 = tf.float32
    sp_logits = tf.cast(
        tf.squeeze(self.supporting_facts_layer(global_output), -1), f32)
    type_logits = tf.cast(self.answer_type_layer(global_output[:, 0]), f32)
    span_logits = tf.cast(self.span_layer(long_output), f32)
    real = long_input_mask(features[feature_names.LONG_PARAGRAPH_BREAKPOINTS])
    outputs = {
        "sp_logits": sp_logits,
        "sp_probs": tf.sigmoid(sp_logits),
        "answer_type_logits": type_logits,
        "answer_type_probs": tf.nn.softmax(type_logits, axis=-1),
        "answer_type": tf.argmax(type_logits, axis=-1, output_type=tf.int32),
    }
    if self.answer_encoding == SPAN:
      start_logits = tf.where(real, span_logits[..., 0], NEG_INF)
      end_logits = tf.where(real, span_logits[..., 1], NEG_INF)
      outputs.update(start_logits=start_logits, end_logits=end_logits)
      start_probs = tf.nn.softmax(start_logits, axis=-1)
      end_probs = tf.nn.softmax(end_logits, axis=-1)
    else:
      outputs["bio_logits"] = span_logits
      probs = tf.nn.softmax(span_logits, axis=-1)
      p_begin, p_inside = probs[..., features_lib.BIO_BEGIN], probs[
          ..., features_lib.BIO_INSIDE]
      # A span [i, j]: B at i, j inside the answer, j + 1 not a continuation.
      next_inside = tf.concat([p_inside[:, 1:], tf.zeros_like(p_inside[:, :1])],
                              axis=1)
      start_probs = p_begin
      end_probs = (p_begin + p_inside) * (1.0 - next_inside)
    spans = decode.sentence_best_spans(
        start_probs, end_probs, features[feature_names.LONG_SENTENCE_IDS],
        features[features_lib.GLOBAL_KINDS],
        features[features_lib.LONG_TOKEN_START],
        features[features_lib.LONG_TOKEN_END], self.max_answer_length)
    outputs.update(spans)
    outputs["answer_global"] = decode.select_answer(
        outputs["sp_probs"], spans["span_score"], self.sp_threshold)
    return outputs
