"""HotpotQA (distractor): the registered task, `@register_task("hotpotqa")`.

Data: the TFRecords of `preprocess.py` (`features.feature_spec`); side
inputs from the paragraph / sentence side-input source ("multihop"). Model:
`head.HotpotQAModel` (supporting facts, answer type, span). Loss: the mean
of the supporting-fact loss (binary cross-entropy summed over the real
global tokens), the answer-type cross-entropy and the span loss (mean of the
start and end cross-entropies; BIO: cross-entropy summed over the real long
tokens). Unlabelled examples add 0; a dev example whose answer was not
located adds no span loss.

Predictions (`write_predictions`): the official submission JSON `{"answer":
{id: text}, "sp": {id: [[title, sent_id], ...]}}` at `sp_threshold`,
decoded as `decode.py` describes. Official scores (`official_scores`, run by
`--mode=eval` on the eval set): the official metric (`evaluate.py`) over a
grid of supporting-fact thresholds against the gold (`gold_file`, or the
labelled records stored in the TFRecords); the report goes to
`threshold_search.json`, the submission at the best threshold to
`predictions_best_threshold.json`.
"""

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras

from etc_realformer.export import batching
from etc_realformer.features import feature_names
from etc_realformer.training import task as task_lib
from tasks.common import output_files
from tasks.hotpotqa import data
from tasks.hotpotqa import decode
from tasks.hotpotqa import evaluate
from tasks.hotpotqa import features as features_lib
from tasks.hotpotqa import head

SPAN, BIO = head.SPAN, head.BIO
PREDICTIONS_FILE = "predictions.json"
BEST_PREDICTIONS_FILE = "predictions_best_threshold.json"
THRESHOLD_SEARCH_FILE = "threshold_search.json"


@task_lib.register_task("hotpotqa")
class HotpotQATask(task_lib.RawInputTask):
  """HotpotQA distractor setting (see `tasks/hotpotqa/features.py`)."""

  side_input_source = features_lib.SEGMENT_PLAN.side_input_source

  def __init__(self,
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
      long_seq_len, global_seq_len: as in preprocessing (original 4096, 256).
      answer_encoding: 'span' (start/end) or 'bio'.
      max_answer_length: longest answer span in wordpieces (original 30).
      sp_threshold: supporting-fact probability threshold of the predictions
        and of the exported signatures.
      sp_threshold_grid: thresholds searched for the best joint F1.
      gold_file: the released JSON of the eval set, for `official_scores`
        over every gold record (default: the labelled records stored in the
        TFRecords, i.e. those preprocessing kept).
      **kwargs: `RawInputTask` arguments (vocab_file, spm_model_file,
        lower_case) and `Task` arguments (input patterns, model_config, ...).
    """
    super().__init__(long_seq_len=long_seq_len,
                     global_seq_len=global_seq_len, **kwargs)
    if answer_encoding not in (SPAN, BIO):
      raise ValueError(f"answer_encoding must be {SPAN!r} or {BIO!r}")
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

  # ----------------------------------------------------------------- model
  def build_model(self) -> head.HotpotQAModel:
    return head.HotpotQAModel(
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
    real_global = tf.not_equal(features[features_lib.GLOBAL_KINDS],
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
      real = head.long_input_mask(
          features[feature_names.LONG_PARAGRAPH_BREAKPOINTS])
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
    """In-graph proxies (the official metric needs text: see
    `official_scores`)."""
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
    is_sentence = tf.equal(features[features_lib.GLOBAL_KINDS],
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
  _PREDICTION_FEATURES = (features_lib.EXAMPLE_ID, "record_json",
                          features_lib.GLOBAL_PARAGRAPH_IDS,
                          features_lib.GLOBAL_SENTENCE_IDS,
                          features_lib.GLOBAL_KINDS)
  _PREDICTION_OUTPUTS = ("sp_probs", "answer_type_probs", "answer_type",
                         "span_score", "span_start_byte", "span_end_byte")

  def prediction_outputs(self, features, outputs):
    """Fixed-shape per-example tensors ([B], [B, 3], [B, G]) for decoding."""
    kept = {k: features[k] for k in self._PREDICTION_FEATURES}
    kept.update({k: outputs[k] for k in self._PREDICTION_OUTPUTS})
    return kept

  def write_predictions(self, predictions: Mapping[str, Any],
                        output_dir: str) -> str:
    """Writes the official submission JSON at `sp_threshold`; returns its
    path."""
    examples = output_files.unbatch(predictions)
    path = os.path.join(output_dir, PREDICTIONS_FILE)
    output_files.write_json(path, decode.predictions_json(
        examples, decode.records_of(examples), self.sp_threshold))
    return path

  def official_scores(self, predictions: Mapping[str, Any],
                      output_dir: str) -> Optional[Dict[str, Any]]:
    """The official metrics at `sp_threshold` and at each threshold of
    `sp_threshold_grid`; the best threshold by joint F1.

    Writes `threshold_search.json` (all of it, per threshold too) and the
    submission at the best threshold. Returns the summary (best threshold
    and its metrics, the metrics at `sp_threshold`), or None without gold.
    """
    examples = output_files.unbatch(predictions)
    by_id = decode.records_of(examples)
    gold = decode.gold_of(by_id, self.gold_file)
    if not gold:
      return None
    search = decode.search_threshold(examples, by_id, gold,
                                     self.sp_threshold_grid)
    summary = {
        "best_threshold": search["best_threshold"],
        "best": search["best"],
        "sp_threshold": self.sp_threshold,
        "at_sp_threshold": evaluate.evaluate(
            decode.predictions_json(examples, by_id, self.sp_threshold),
            gold),
    }
    output_files.write_json(os.path.join(output_dir, THRESHOLD_SEARCH_FILE), {
        "num_gold": len(gold), "num_predicted": len(examples), **summary,
        "by_threshold": {str(k): v for k, v in
                         search["by_threshold"].items()}})
    output_files.write_json(
        os.path.join(output_dir, BEST_PREDICTIONS_FILE),
        decode.predictions_json(examples, by_id, search["best_threshold"]))
    return summary

  # ----------------------------------------------------------------- export
  def serving_outputs(self, features, outputs):
    del features
    return {k: outputs[k] for k in (
        "sp_probs", "answer_type_probs", "answer_type", "span_score",
        "span_start", "span_end", "span_start_byte", "span_end_byte",
        "answer_global")}

  def build_featurizer(self) -> features_lib.HotpotFeaturizer:
    return features_lib.HotpotFeaturizer(**self.featurizer_kwargs())

  def raw_serving_signatures(self, forward, featurizer, names):
    # What decoding reads besides the model's outputs.
    decoded = ("global_kinds", "global_paragraph_ids", "global_sentence_ids")

    # One record's features; both signatures call this one trace.
    @tf.function(input_signature=[
        tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.string),
        tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int32)])
    def featurize(question, titles, sentences, num_sentences):
      feats = featurizer.featurize(question, titles, sentences,
                                      num_sentences)
      return {k: feats[k] for k in (*names, *decoded)}

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
      feats = featurize(question, titles, sentences, num_sentences)
      batch = {k: feats[k][tf.newaxis] for k in names}
      out = forward(batch)
      return decode.raw_outputs(feats, {k: v[0] for k, v in out.items()},
                                titles, sentences, num_sentences)

    raw_specs = {k: tf.TensorSpec(v.shape, v.dtype) for k, v in
                 serve_raw.get_concrete_function().structured_outputs.items()}
    name = "serve_raw_batch"

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="question"),
        tf.TensorSpec([None, None], tf.string, name="titles"),
        tf.TensorSpec([None], tf.int32, name="num_paragraphs"),
        tf.TensorSpec([None, None], tf.string, name="sentences"),
        tf.TensorSpec([None, None], tf.int32, name="num_sentences")])
    def serve_raw_batch(question, titles, num_paragraphs, sentences,
                        num_sentences):
      """B records, every input [B, ...] (TF Serving can batch requests):
      question [B]; titles [B, P] and num_sentences [B, P] (sentences per
      paragraph), padded past num_paragraphs [B]; sentences [B, S] (the
      record's sentences in paragraph order), padded past their sum;
      padding of any value -> serve_raw's outputs per record ([B];
      answer_type_probabilities [B, 3]; sentence_sp_probabilities [B, S],
      title_sp_probabilities and paragraph_sp_probabilities [B, P], -1
      past the record's)."""
      inputs = dict(question=question, titles=titles,
                    num_paragraphs=num_paragraphs, sentences=sentences,
                    num_sentences=num_sentences)
      # The row checks first: the others broadcast over the batch.
      with tf.control_dependencies(batching.same_batch(name, inputs)):
        counted_sentences = batching.counted(num_sentences, num_paragraphs)
        record_sentences = tf.reduce_sum(counted_sentences, axis=1)
        checks = batching.counts_fit(
            name, "num_paragraphs", num_paragraphs,
            {"titles": titles, "num_sentences": num_sentences})
        checks += batching.non_negative(name, "num_sentences",
                                        counted_sentences)
        checks += batching.counts_fit(name, "num_sentences",
                                      record_sentences,
                                      {"sentences": sentences}, summed=True)
      rows = (question, titles, num_paragraphs, sentences, num_sentences)

      def record(row):
        q, t, num_p, s, num_s = row
        num_s = num_s[:num_p]
        return q, t[:num_p], s[:tf.reduce_sum(num_s)], num_s

      feature_specs = {k: tf.TensorSpec(v.shape, v.dtype)
                       for k, v in featurize.get_concrete_function()
                       .structured_outputs.items()}
      with tf.control_dependencies(checks):
        feats = tf.map_fn(lambda row: featurize(*record(row)), rows,
                          fn_output_signature=feature_specs)
      out = forward(feats)
      num_titles = tf.shape(titles)[1]
      num_all_sentences = tf.shape(sentences)[1]
      padded_to = {"sentence_sp_probabilities": num_all_sentences,
                   "title_sp_probabilities": num_titles,
                   "paragraph_sp_probabilities": num_titles}

      def decode_row(args):
        row, f, o = args
        _, t, s, num_s = record(row)
        raw = decode.raw_outputs(f, o, t, s, num_s)
        for k, width in padded_to.items():
          raw[k] = batching.pad_vector(raw[k], width, -1.0)
        return raw

      used = ("sp_probs", "answer_type", "answer_type_probs",
              "answer_global", "span_start_byte", "span_end_byte")
      return tf.map_fn(
          decode_row, (rows, feats, {k: out[k] for k in used}),
          fn_output_signature=raw_specs)

    return {"serve_raw": serve_raw.get_concrete_function(),
            name: serve_raw_batch.get_concrete_function()}
