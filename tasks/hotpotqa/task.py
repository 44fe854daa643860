"""HotpotQA (distractor): the model heads, loss, metrics, predictions, export.

Model: ETC-RealFormer encoder, then (as the original)
- supporting facts: one sigmoid logit per global token (Dense(1));
- answer type: a 3-way softmax (span / yes / no) on the CLS global token;
- span: start and end logits over the long tokens (Dense(2)); or, with
  `answer_encoding='bio'`, B/I/O logits per long token (Dense(3)).
Loss: the mean of the supporting-fact loss (binary cross-entropy summed over
the real global tokens), the answer-type cross-entropy and the span loss
(mean of the start and end cross-entropies; BIO: cross-entropy summed over
the real long tokens). Unlabelled examples add 0; a dev example whose answer
was not located adds no span loss.

Predictions (`predict`): the official submission JSON `{"answer": {id:
text}, "sp": {id: [[title, sent_id], ...]}}` at `sp_threshold`, decoded as
`decode.py` describes; with gold at hand (`gold_file`, or the labels stored
in the TFRecords) also the official metrics over a threshold grid and the
predictions at the best threshold. `python -m tasks.hotpotqa --mode=eval`
runs that on the eval input after the in-graph metrics.
"""

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import gin
import tensorflow as tf
import tf_keras

from tasks import base
from tasks.hotpotqa import data
from tasks.hotpotqa import decode
from tasks.hotpotqa import features as features_lib

# Logit of padding long tokens (float32, so no overflow).
NEG_INF = -1e9
SPAN, BIO = "span", "bio"
PREDICTIONS_FILE = "predictions.json"
BEST_PREDICTIONS_FILE = "predictions_best_threshold.json"
THRESHOLD_SEARCH_FILE = "threshold_search.json"


def long_input_mask(long_paragraph_breakpoints: tf.Tensor) -> tf.Tensor:
  """bool [B, L]: real (non-padding) long tokens = up to the last breakpoint."""
  after = tf.cumsum(long_paragraph_breakpoints, axis=-1, reverse=True)
  return after > 0


class HotpotQAModel(base.EtcTaskModel):
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
    real = long_input_mask(features["long_paragraph_breakpoints"])
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
        start_probs, end_probs, features["long_sentence_ids"],
        features["global_kinds"], features["long_token_start"],
        features["long_token_end"], self.max_answer_length)
    outputs.update(spans)
    outputs["answer_global"] = decode.select_answer(
        outputs["sp_probs"], spans["span_score"], self.sp_threshold)
    return outputs


@gin.configurable
class HotpotQATask(base.RawInputTask):
  """HotpotQA distractor setting (see `tasks/hotpotqa/features.py`)."""

  name = "hotpotqa"

  def __init__(self,
               vocab_file: Optional[str] = None,
               spm_model_file: Optional[str] = None,
               lower_case: bool = True,
               long_seq_len: int = 4096,
               global_seq_len: int = 256,
               answer_encoding: str = SPAN,
               max_answer_length: int = 30,
               sp_threshold: float = 0.5,
               sp_threshold_grid: Sequence[float] = (
                   decode.DEFAULT_THRESHOLD_GRID),
               gold_file: Optional[str] = None,
               **kwargs):
    """HotpotQA settings.

    Args:
      vocab_file: the WordPiece vocab.txt used for preprocessing; needed for
        the raw-input signature `serve_raw`.
      spm_model_file: a SentencePiece model instead of `vocab_file`.
      lower_case: as in preprocessing.
      long_seq_len, global_seq_len: as in preprocessing (original 4096, 256).
      answer_encoding: 'span' (start/end) or 'bio'.
      max_answer_length: longest answer span in wordpieces (original 30).
      sp_threshold: supporting-fact probability threshold of `predict` and of
        the exported signatures.
      sp_threshold_grid: thresholds searched for the best joint F1.
      gold_file: the released JSON of the predicted split, for the official
        metric (default: the gold stored in the TFRecords).
      **kwargs: `base.Task` arguments (input patterns, model_config, ...).
    """
    super().__init__(long_seq_len=long_seq_len,
                     global_seq_len=global_seq_len, **kwargs)
    if answer_encoding not in (SPAN, BIO):
      raise ValueError(f"answer_encoding must be {SPAN!r} or {BIO!r}")
    self.vocab_file = vocab_file
    self.spm_model_file = spm_model_file
    self.lower_case = lower_case
    self.answer_encoding = answer_encoding
    self.max_answer_length = max_answer_length
    self.sp_threshold = sp_threshold
    self.sp_threshold_grid = tuple(sp_threshold_grid)
    self.gold_file = gold_file

  # ------------------------------------------------------------------ data
  def feature_spec(self):
    return features_lib.feature_spec(self.long_seq_len, self.global_seq_len)

  def model_features(self) -> Tuple[str, ...]:
    return tuple(features_lib.MODEL_FEATURES)

  def side_inputs(self, features):
    return base.multihop_side_inputs(self.model_config, features)

  # ----------------------------------------------------------------- model
  def build_model(self) -> HotpotQAModel:
    return HotpotQAModel(
        self.build_encoder(), self.side_inputs,
        initializer_range=self.model_config.initializer_range,
        answer_encoding=self.answer_encoding,
        max_answer_length=self.max_answer_length,
        sp_threshold=self.sp_threshold, name="hotpotqa_model")

  # -------------------------------------------------------- loss & metrics
  def loss_terms(self, features, outputs) -> Dict[str, tf.Tensor]:
    """float32 [B] supporting-fact, answer-type and span losses."""
    answer_type = tf.cast(features["answer_type"], tf.int32)
    labelled = answer_type >= 0
    real_global = tf.not_equal(features["global_kinds"],
                               features_lib.KIND_PAD)
    sp = tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(features["supporting_facts"], tf.float32),
        logits=outputs["sp_logits"])
    sp = tf.reduce_sum(tf.where(real_global, sp, 0.0), axis=-1)
    type_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.maximum(answer_type, 0),
        logits=outputs["answer_type_logits"])
    if self.answer_encoding == SPAN:
      start = tf.cast(features["answer_start"], tf.int32)
      end = tf.cast(features["answer_end"], tf.int32)
      located = labelled & (start >= 0) & (end >= 0)
      span = 0.5 * (
          tf.nn.sparse_softmax_cross_entropy_with_logits(
              labels=tf.maximum(start, 0), logits=outputs["start_logits"]) +
          tf.nn.sparse_softmax_cross_entropy_with_logits(
              labels=tf.maximum(end, 0), logits=outputs["end_logits"]))
    else:
      bio = tf.cast(features["answer_bio_ids"], tf.int32)
      located = labelled & tf.reduce_any(bio >= 0, axis=-1)
      real = long_input_mask(features["long_paragraph_breakpoints"])
      per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=tf.maximum(bio, 0), logits=outputs["bio_logits"])
      span = tf.reduce_sum(tf.where(real & (bio >= 0), per_token, 0.0),
                           axis=-1)
    return {"sp_loss": tf.where(labelled, sp, 0.0),
            "answer_type_loss": tf.where(labelled, type_loss, 0.0),
            "span_loss": tf.where(located, span, 0.0)}

  def per_example_loss(self, features, outputs) -> tf.Tensor:
    terms = self.loss_terms(features, outputs)
    return (terms["sp_loss"] + terms["answer_type_loss"] +
            terms["span_loss"]) / 3.0

  def build_metrics(self) -> List[tf_keras.metrics.Metric]:
    """In-graph proxies (the official metric needs text: see `predict`)."""
    return [tf_keras.metrics.Mean(name, dtype=tf.float32) for name in (
        "sentence_sp_f1", "sentence_sp_em", "answer_type_accuracy",
        "span_exact", "sp_loss", "answer_type_loss", "span_loss")]

  def update_metrics(self, metrics, features, outputs) -> None:
    """Per labelled example, at `sp_threshold`:

    sentence_sp_f1 / _em: F1 / exact match of the predicted vs gold flags of
      the kept sentence tokens (official-style per-example F1; facts cut by
      truncation are not counted here, unlike the official metric);
    answer_type_accuracy; span_exact: predicted span = labelled span, over
      span answers that were located; and the three loss terms.
    """
    f32 = tf.float32
    answer_type = tf.cast(features["answer_type"], tf.int32)
    labelled = tf.cast(answer_type >= 0, f32)
    is_sentence = tf.equal(features["global_kinds"],
                           features_lib.KIND_SENTENCE)
    gold = tf.equal(features["supporting_facts"], 1) & is_sentence
    pred = (outputs["sp_probs"] >= self.sp_threshold) & is_sentence
    tp = tf.reduce_sum(tf.cast(gold & pred, f32), -1)
    num_pred = tf.reduce_sum(tf.cast(pred, f32), -1)
    num_gold = tf.reduce_sum(tf.cast(gold, f32), -1)
    prec = tf.math.divide_no_nan(tp, num_pred)
    rec = tf.math.divide_no_nan(tp, num_gold)
    f1 = tf.math.divide_no_nan(2 * prec * rec, prec + rec)
    em = tf.cast(tf.equal(tp, num_pred) & tf.equal(tp, num_gold), f32)
    by_name = {m.name: m for m in metrics}
    by_name["sentence_sp_f1"].update_state(f1, sample_weight=labelled)
    by_name["sentence_sp_em"].update_state(em, sample_weight=labelled)
    by_name["answer_type_accuracy"].update_state(
        tf.cast(tf.equal(outputs["answer_type"], answer_type), f32),
        sample_weight=labelled)
    g = outputs["answer_global"]
    safe_g = tf.maximum(g, 0)
    pred_start = tf.where(
        g >= 0, tf.gather(outputs["span_start"], safe_g, batch_dims=1), -1)
    pred_end = tf.where(
        g >= 0, tf.gather(outputs["span_end"], safe_g, batch_dims=1), -1)
    start = tf.cast(features["answer_start"], tf.int32)
    end = tf.cast(features["answer_end"], tf.int32)
    span_labelled = tf.cast(
        tf.equal(answer_type, data.SPAN) & (start >= 0), f32)
    by_name["span_exact"].update_state(
        tf.cast(tf.equal(pred_start, start) & tf.equal(pred_end, end), f32),
        sample_weight=span_labelled)
    for name, value in self.loss_terms(features, outputs).items():
      by_name[name].update_state(value, sample_weight=labelled)

  # ------------------------------------------------------------ predictions
  _PREDICTION_FEATURES = ("example_id", "record_json", "global_paragraph_ids",
                          "global_sentence_ids", "global_kinds")
  _PREDICTION_OUTPUTS = ("sp_probs", "answer_type_probs", "answer_type",
                         "span_score", "span_start_byte", "span_end_byte")

  def prediction_outputs(self, features, outputs):
    """Fixed-shape per-example tensors ([B], [B, 3], [B, G]) for decoding."""
    kept = {k: features[k] for k in self._PREDICTION_FEATURES}
    kept.update({k: outputs[k] for k in self._PREDICTION_OUTPUTS})
    return kept

  def write_predictions(self, predictions: Mapping[str, Any],
                        output_dir: str) -> str:
    """Writes the official submission JSON; returns its path.

    With gold available (`gold_file`, else the TFRecords' labelled records)
    also writes `threshold_search.json` (official metrics at each threshold
    of `sp_threshold_grid` and at `sp_threshold`, the best threshold by joint
    F1) and the submission at the best threshold.
    """
    examples = decode.unbatch(predictions)
    records = decode.records_of(examples)
    submission = decode.predictions_json(examples, records, self.sp_threshold)
    path = os.path.join(output_dir, PREDICTIONS_FILE)
    _write_json(path, submission)
    gold = decode.gold_of(records, self.gold_file)
    if not gold:
      return path
    from tasks.hotpotqa import evaluate  # pylint: disable=g-import-not-at-top
    search = decode.search_threshold(examples, records, gold,
                                     self.sp_threshold_grid)
    report = {
        "num_gold": len(gold),
        "num_predicted": len(examples),
        "sp_threshold": self.sp_threshold,
        "at_sp_threshold": evaluate.evaluate(submission, gold),
        "best_threshold": search["best_threshold"],
        "best": search["best"],
        "by_threshold": {str(k): v for k, v in
                         search["by_threshold"].items()},
    }
    _write_json(os.path.join(output_dir, THRESHOLD_SEARCH_FILE), report)
    _write_json(os.path.join(output_dir, BEST_PREDICTIONS_FILE),
                decode.predictions_json(examples, records,
                                        search["best_threshold"]))
    best = search["best"]
    line = (f"hotpotqa official | threshold {search['best_threshold']:.2f} | "
            f"ans EM/F1 {best['em']:.4f}/{best['f1']:.4f} | sp EM/F1 "
            f"{best['sp_em']:.4f}/{best['sp_f1']:.4f} | joint EM/F1 "
            f"{best['joint_em']:.4f}/{best['joint_f1']:.4f}")
    logging.info(line)
    print(line, flush=True)
    return path

  # ----------------------------------------------------------------- export
  def serving_outputs(self, features, outputs):
    del features
    return {k: outputs[k] for k in (
        "sp_probs", "answer_type_probs", "answer_type", "span_score",
        "span_start", "span_end", "span_start_byte", "span_end_byte",
        "answer_global")}

  def build_featurizer(self) -> features_lib.HotpotFeaturizer:
    return features_lib.HotpotFeaturizer(
        vocab_path=self.vocab_file, spm_model_path=self.spm_model_file,
        long_seq_len=self.long_seq_len, global_seq_len=self.global_seq_len,
        lower_case=self.lower_case)

  def raw_serving_signatures(self, model, featurizer, names):
    signatures = {}

    @tf.function(input_signature=[
        tf.TensorSpec([], tf.string, name="question"),
        tf.TensorSpec([None], tf.string, name="titles"),
        tf.TensorSpec([None], tf.string, name="sentences"),
        tf.TensorSpec([None], tf.int32, name="num_sentences")])
    def serve_raw(question, titles, sentences, num_sentences):
      """One record: question, the P titles, the S sentences of all
      paragraphs in order and the sentence count per paragraph ->

      answer []: the answer text ("yes"/"no", a substring of one title or
        sentence, or "" when no span is admissible);
      answer_type [] (0 span, 1 yes, 2 no), answer_type_probabilities [3];
      answer_paragraph, answer_sentence []: where the span is (sentence -1 =
        the title; both -1 when not a span);
      answer_start_byte, answer_end_byte []: its UTF-8 byte range [start,
        end) in that string (-1 when not a span);
      sentence_sp_probabilities [S], title_sp_probabilities [P],
      paragraph_sp_probabilities [P]: supporting-fact probabilities (-1 for
        what was cut to fit the sequences).
      """
      feats = featurizer.featurize_tf(question, titles, sentences,
                                      num_sentences)
      batch = {k: feats[k][tf.newaxis] for k in names}
      out = model(batch, training=False)
      return raw_outputs(feats, {k: v[0] for k, v in out.items()}, titles,
                         sentences, num_sentences)

    signatures["serve_raw"] = serve_raw.get_concrete_function()
    return signatures


def raw_outputs(feats: Mapping[str, tf.Tensor],
                out: Mapping[str, tf.Tensor], titles: tf.Tensor,
                sentences: tf.Tensor, num_sentences: tf.Tensor
                ) -> Dict[str, tf.Tensor]:
  """One example's model outputs mapped back onto the raw inputs."""
  i32 = tf.int32
  kinds = feats["global_kinds"]
  para = feats["global_paragraph_ids"]
  sent = feats["global_sentence_ids"]
  probs = out["sp_probs"]
  sent_starts = tf.cumsum(num_sentences, exclusive=True)  # [P]
  num_paras = tf.size(titles)
  num_sents = tf.size(sentences)

  def scatter(kind, index_fn, size):
    where = tf.where(tf.equal(kinds, kind))[:, 0]
    index = index_fn(tf.gather(para, where), tf.gather(sent, where))
    return tf.tensor_scatter_nd_update(
        tf.fill([size], -1.0), index[:, tf.newaxis], tf.gather(probs, where))

  flat_sentence = lambda p, s: tf.gather(sent_starts, p) + s  # noqa: E731
  answer_type = out["answer_type"]
  g = out["answer_global"]
  is_span = tf.logical_and(tf.equal(answer_type, data.SPAN), g >= 0)
  safe_g = tf.maximum(g, 0)
  # Clamped so that the unselected branches of tf.where index safely.
  g_para = tf.maximum(tf.gather(para, safe_g), 0)
  g_sent = tf.gather(sent, safe_g)
  start = tf.gather(out["span_start_byte"], safe_g)
  end = tf.gather(out["span_end_byte"], safe_g)
  texts = tf.concat([titles, sentences, [""]], axis=0)
  text_index = tf.where(
      is_span,
      tf.where(g_sent < 0, g_para,
               num_paras + flat_sentence(g_para, tf.maximum(g_sent, 0))),
      num_paras + num_sents)
  # Not a span: an empty cut of the "" sentinel (substr rejects positions
  # past the end).
  span_text = tf.strings.strip(tf.strings.substr(
      tf.gather(texts, text_index), tf.where(is_span, start, 0),
      tf.where(is_span, end - start, 0), unit="BYTE"))
  answer = tf.where(
      tf.equal(answer_type, data.YES), tf.constant("yes"),
      tf.where(tf.equal(answer_type, data.NO), tf.constant("no"),
               tf.where(is_span, span_text, tf.constant(""))))
  minus_one = tf.constant(-1, i32)
  return {
      "answer": answer,
      "answer_type": answer_type,
      "answer_type_probabilities": out["answer_type_probs"],
      "answer_paragraph": tf.where(is_span, g_para, minus_one),
      "answer_sentence": tf.where(is_span, g_sent, minus_one),
      "answer_start_byte": tf.where(is_span, start, minus_one),
      "answer_end_byte": tf.where(is_span, end, minus_one),
      "sentence_sp_probabilities": scatter(
          features_lib.KIND_SENTENCE, flat_sentence, num_sents),
      "title_sp_probabilities": scatter(
          features_lib.KIND_TITLE, lambda p, s: p, num_paras),
      "paragraph_sp_probabilities": scatter(
          features_lib.KIND_PARAGRAPH, lambda p, s: p, num_paras),
  }


def _write_json(path: str, value: Any) -> None:
  with tf.io.gfile.GFile(path, "w") as f:
    json.dump(value, f, indent=1, ensure_ascii=False)
    f.write("\n")
