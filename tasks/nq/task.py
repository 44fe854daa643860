"""Natural Questions: the task (data, loss, metrics, predictions, official
scores, export).

Model (`head.NqModel`): the ETC-RealFormer encoder over each window
(`features.py`), four position heads (long / short answer start and end) and
a 5-way answer type head. Side inputs: the "breakpoints" source (long and
global breakpoints, sentence ids), as the original.
Loss: the mean of the five cross-entropies (four position labels, each 0 =
[CLS] when the window does not hold that end of the span; the answer type),
as the original;
an unlabelled window (answer_type -1) adds 0.

Predictions: the windows of each `example_id` are aggregated into the
official predictions JSON (`decode.py`). On the eval set `official_scores`
scores them with the official scorer (`evaluate.py`) against `gold_file`
(the five-way annotated `nq-dev-*.jsonl.gz`): long / short best-threshold
F1, P, R, with the whole report in `nq_eval.json`.

Export: `serving_default` / `serve_examples` (per window), and with a
vocabulary `serve_raw` (question + document tokens + HTML flags, candidates
optional) and `serve_text` (question + simplified-format document text): the
in-graph featurizer cuts the windows, the model runs on all of them and the
document's answer is decoded in the graph; `serve_raw_batch` and
`serve_text_batch` do the same for a batch of documents, padded, with
counts (`etc_realformer/export/README.md`).
"""

import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

from absl import logging
import tensorflow as tf
import tf_keras

from etc_realformer.export import batching
from etc_realformer.training import task as task_lib
from tasks.common import output_files
from tasks.nq import decode
from tasks.nq import evaluate
from tasks.nq import features as features_lib
from tasks.nq import head

PREDICTIONS_FILE = "predictions.json"
SCORES_FILE = "nq_eval.json"
POSITION_HEADS = head.POSITION_HEADS


@task_lib.register_task("nq")
class NaturalQuestionsTask(task_lib.RawInputTask):
  """Natural Questions (see `tasks/nq/features.py` for the windows)."""

  side_input_source = features_lib.SEGMENT_PLAN.side_input_source
  raw_signatures_name = "raw-input signatures"

  def __init__(self,
               long_seq_len: int = features_lib.DEFAULT_LONG_SEQ_LEN,
               global_seq_len: int = features_lib.DEFAULT_GLOBAL_SEQ_LEN,
               stride: int = features_lib.DEFAULT_STRIDE,
               max_question_len: int = features_lib.DEFAULT_MAX_QUESTION_LEN,
               answer_type_source: str = head.GLOBAL,
               max_short_answer_length: int = 32,
               score_mode: str = decode.DIFFERENCE,
               gold_file: Optional[str] = None,
               **kwargs):
    """NQ settings.

    Args:
      long_seq_len, global_seq_len, stride, max_question_len: as in
        preprocessing (original 4096, 230, 2048, 32).
      answer_type_source: 'global' ([CLS] global token) or 'long' (the long
        [CLS], as the original).
      max_short_answer_length: longest short answer, in wordpieces.
      score_mode: 'difference' (logit - [CLS] logit) or 'ratio' (logit /
        [CLS] logit, the original's); see `decode.py`.
      gold_file: the five-way annotated gold of the eval split
        (`nq-dev-??.jsonl.gz` glob, original download format):
        `official_scores` scores against it.
      **kwargs: `RawInputTask` arguments (vocab_file, spm_model_file,
        lower_case) and `Task` arguments (input patterns, model_config, ...).
    """
    super().__init__(long_seq_len=long_seq_len,
                     global_seq_len=global_seq_len, **kwargs)
    head.check_settings(answer_type_source, score_mode)
    self.stride = stride
    self.max_question_len = max_question_len
    self.answer_type_source = answer_type_source
    self.max_short_answer_length = max_short_answer_length
    self.score_mode = score_mode
    self.gold_file = gold_file

  # ------------------------------------------------------------------ data
  def feature_spec(self):
    return features_lib.feature_spec(self.long_seq_len, self.global_seq_len)

  def model_features(self) -> Tuple[str, ...]:
    """The encoder's inputs and what decoding reads (no labels)."""
    return tuple(features_lib.MODEL_FEATURES) + tuple(
        k for k in decode.DECODE_FEATURES
        if k not in features_lib.MODEL_FEATURES)

  # ----------------------------------------------------------------- model
  def build_model(self) -> head.NqModel:
    return head.NqModel(
        self.build_encoder(), self.side_inputs,
        initializer_range=self.model_config.initializer_range,
        answer_type_source=self.answer_type_source,
        max_short_answer_length=self.max_short_answer_length,
        score_mode=self.score_mode, name="nq_model")

  # -------------------------------------------------------- loss & metrics
  def loss_terms(self, features, outputs) -> Dict[str, tf.Tensor]:
    """float32 [B] cross-entropies of the five heads (0 when unlabelled)."""
    answer_type = tf.cast(features["answer_type"], tf.int32)
    labelled = answer_type >= 0
    terms = {}
    for name in POSITION_HEADS:
      label = tf.maximum(tf.cast(features[name], tf.int32), 0)
      terms[f"{name}_loss"] = tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=label, logits=outputs[f"{name}_logits"])
    terms["answer_type_loss"] = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.maximum(answer_type, 0),
        logits=outputs["answer_type_logits"])
    return {k: tf.where(labelled, v, 0.0) for k, v in terms.items()}

  def per_example_loss(self, features, outputs) -> tf.Tensor:
    return tf.add_n(list(self.loss_terms(features, outputs).values())) / 5.0

  def build_metrics(self) -> List[tf_keras.metrics.Metric]:
    """Cheap in-graph proxies (the official F1 needs whole documents)."""
    names = (["answer_type_accuracy"] +
             [f"{name}_accuracy" for name in POSITION_HEADS] +
             ["long_span_accuracy", "short_span_accuracy"] +
             [f"{name}_loss" for name in POSITION_HEADS] +
             ["answer_type_loss"])
    return [tf_keras.metrics.Mean(n, dtype=tf.float32) for n in names]

  def update_metrics(self, metrics, features, outputs) -> None:
    """Per labelled window: answer type accuracy; each head's argmax =
    label; long / short span accuracy (both ends right, over the windows
    whose label is a span, not [CLS]); the loss terms."""
    f32 = tf.float32
    by_name = {m.name: m for m in metrics}
    answer_type = tf.cast(features["answer_type"], tf.int32)
    labelled = answer_type >= 0
    weight = tf.cast(labelled, f32)
    by_name["answer_type_accuracy"].update_state(
        tf.cast(tf.equal(outputs["answer_type"], answer_type), f32),
        sample_weight=weight)
    right = {}
    for name in POSITION_HEADS:
      pred = tf.argmax(outputs[f"{name}_logits"], axis=-1,
                       output_type=tf.int32)
      right[name] = tf.equal(pred, tf.cast(features[name], tf.int32))
      by_name[f"{name}_accuracy"].update_state(tf.cast(right[name], f32),
                                               sample_weight=weight)
    for kind in ("long", "short"):
      has_span = labelled & (tf.cast(features[f"{kind}_start"], tf.int32) > 0)
      by_name[f"{kind}_span_accuracy"].update_state(
          tf.cast(right[f"{kind}_start"] & right[f"{kind}_end"], f32),
          sample_weight=tf.cast(has_span, f32))
    for name, value in self.loss_terms(features, outputs).items():
      by_name[name].update_state(value, sample_weight=weight)

  # ------------------------------------------------------------ predictions
  def prediction_outputs(self, features, outputs):
    """Per window: ids, the answer-type logits and the window decoding."""
    kept = {"example_id": features["example_id"],
            "window_index": features["window_index"],
            "answer_type_logits": outputs["answer_type_logits"]}
    kept.update({k: outputs[k] for k in decode.WINDOW_OUTPUTS})
    return kept

  def submission(self, predictions: Mapping[str, Any]) -> Dict[str, Any]:
    """The official predictions object: one prediction per document."""
    return decode.predictions_json(output_files.unbatch(predictions))

  def write_predictions(self, predictions: Mapping[str, Any],
                        output_dir: str) -> str:
    """Writes the official predictions JSON; returns its path."""
    path = os.path.join(output_dir, PREDICTIONS_FILE)
    output_files.write_json(path, self.submission(predictions))
    return path

  def has_official_scores(self) -> bool:
    return bool(self.gold_file)

  def official_scores(self, predictions: Mapping[str, Any],
                      output_dir: str) -> Optional[Dict[str, Any]]:
    """The official NQ scores of the eval set's predictions against
    `gold_file` (a gold document without a window counts as a null
    prediction): `evaluate.summary` of the report, which is written whole to
    `output_dir/nq_eval.json`. None without `gold_file`.

    Raises:
      UserInputError: a predicted example id is not in `gold_file`.
    """
    if not self.gold_file:
      logging.warning("NaturalQuestionsTask.gold_file is not set: no "
                      "official NQ scores")
      return None
    report = evaluate.score_predictions(
        self.gold_file, self.submission(predictions),
        predictions_name=f"predictions of {self.input_patterns['eval']}")
    output_files.write_json(os.path.join(output_dir, SCORES_FILE), report)
    logging.info(evaluate.summary_line(report))
    return evaluate.summary(report)

  # ----------------------------------------------------------------- export
  def serving_outputs(self, features, outputs):
    del features
    return {k: outputs[k] for k in (
        "answer_type_logits", "answer_type_probs", "answer_type",
        *decode.WINDOW_OUTPUTS)}

  def build_featurizer(self) -> "features_lib.NqFeaturizer":
    return features_lib.NqFeaturizer(
        stride=self.stride, max_question_len=self.max_question_len,
        **self.featurizer_kwargs())

  def raw_serving_signatures(self, forward, featurizer, names):
    signatures = {}
    window_specs = self.model_input_spec()  # [W, ...]: a document's windows

    def document(out, doc_tokens, doc_token_is_html):
      """One document's answer from its windows' outputs."""
      doc = decode.document_answer(
          {k: out[k] for k in decode.WINDOW_OUTPUTS},
          out["answer_type_logits"])
      doc["num_windows"] = tf.shape(out["answer_type_logits"])[0]
      doc["long_answer_text"] = decode.span_text(
          doc_tokens, doc_token_is_html, doc["long_start_token"],
          doc["long_end_token"])
      doc["short_answer_text"] = decode.span_text(
          doc_tokens, doc_token_is_html, doc["short_start_token"],
          doc["short_end_token"])
      return doc

    def answer(windows, doc_tokens, doc_token_is_html):
      return document(forward(windows), doc_tokens, doc_token_is_html)

    def candidates_or_html(doc_tokens, doc_token_is_html, candidate_starts,
                           candidate_ends, candidate_top_level):
      """The given candidates, or, when none is given, those of the HTML
      tags."""
      html_starts, html_ends, html_top = features_lib.html_candidates(
          doc_tokens, doc_token_is_html)
      given = tf.size(candidate_starts) > 0
      starts = tf.cond(given, lambda: candidate_starts, lambda: html_starts)
      ends = tf.cond(given, lambda: candidate_ends, lambda: html_ends)
      top = tf.cond(given, lambda: candidate_top_level, lambda: html_top)
      return starts, ends, top

    @tf.function(input_signature=[
        tf.TensorSpec([], tf.string, name="question"),
        tf.TensorSpec([None], tf.string, name="doc_tokens"),
        tf.TensorSpec([None], tf.bool, name="doc_token_is_html"),
        tf.TensorSpec([None], tf.int32, name="candidate_starts"),
        tf.TensorSpec([None], tf.int32, name="candidate_ends"),
        tf.TensorSpec([None], tf.bool, name="candidate_top_level")])
    def serve_raw(question, doc_tokens, doc_token_is_html, candidate_starts,
                  candidate_ends, candidate_top_level):
      """One document: the question, its tokens (`document_tokens[*].token`)
      and HTML flags, and its long-answer candidates ([start, end) token
      spans and top-level flags; all three empty = found from the HTML
      tags) -> the document's answer (`decode.document_answer`: token and
      byte spans, scores, yes_no_answer, answer type), num_windows, and the
      answers' text (their non-HTML tokens joined by spaces)."""
      windows = featurizer.featurize(
          question, doc_tokens, doc_token_is_html,
          *candidates_or_html(doc_tokens, doc_token_is_html,
                              candidate_starts, candidate_ends,
                              candidate_top_level))
      return answer(windows, doc_tokens, doc_token_is_html)

    @tf.function(input_signature=[
        tf.TensorSpec([], tf.string, name="question"),
        tf.TensorSpec([], tf.string, name="document_text")])
    def serve_text(question, document_text):
      """One document as the simplified format's `document_text` (tokens
      separated by single spaces; candidates from the HTML tags) -> as
      `serve_raw`; token indices are into the space-split text."""
      tokens, is_html = features_lib.split_document_text(document_text)
      starts, ends, top = features_lib.html_candidates(tokens, is_html)
      windows = featurizer.featurize(question, tokens, is_html, starts, ends,
                                     top)
      return answer(windows, tokens, is_html)

    signatures["serve_raw"] = serve_raw.get_concrete_function()
    signatures["serve_text"] = serve_text.get_concrete_function()
    answer_specs = {
        k: tf.TensorSpec(v.shape, v.dtype) for k, v in
        signatures["serve_raw"].structured_outputs.items()}

    def answer_batch(rows, featurize_row, tokens_of_row):
      """Every document's windows featurized (`featurize_row(row)` ->
      [W, ...]), run through the model in one call, and decoded per
      document (`tokens_of_row(row)` -> its tokens and HTML flags)."""
      def windows_of(row):
        windows = featurize_row(row)
        return {k: windows[k] for k in names}

      ragged = tf.map_fn(
          windows_of, rows,
          fn_output_signature={
              k: tf.RaggedTensorSpec(s.shape, s.dtype, ragged_rank=0)
              for k, s in window_specs.items()})  # [B, (W), ...]
      splits = ragged[names[0]].row_splits
      out = forward({k: v.flat_values for k, v in ragged.items()})
      used = (*decode.WINDOW_OUTPUTS, "answer_type_logits")
      per_document = {k: tf.RaggedTensor.from_row_splits(out[k], splits)
                      for k in used}

      def decode_row(args):
        row, windows_out = args
        return document(windows_out, *tokens_of_row(row))

      return tf.map_fn(decode_row, (rows, per_document),
                       fn_output_signature=answer_specs)

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="question"),
        tf.TensorSpec([None, None], tf.string, name="doc_tokens"),
        tf.TensorSpec([None, None], tf.bool, name="doc_token_is_html"),
        tf.TensorSpec([None], tf.int32, name="num_doc_tokens"),
        tf.TensorSpec([None, None], tf.int32, name="candidate_starts"),
        tf.TensorSpec([None, None], tf.int32, name="candidate_ends"),
        tf.TensorSpec([None, None], tf.bool, name="candidate_top_level"),
        tf.TensorSpec([None], tf.int32, name="num_candidates")])
    def serve_raw_batch(question, doc_tokens, doc_token_is_html,
                        num_doc_tokens, candidate_starts, candidate_ends,
                        candidate_top_level, num_candidates):
      """B documents, every input [B, ...] (TF Serving can batch
      requests): question [B]; doc_tokens and doc_token_is_html [B, T],
      padded past num_doc_tokens [B]; candidate_starts, candidate_ends,
      candidate_top_level [B, C], padded past num_candidates [B] (0 =
      found from the HTML tags); padding of any value -> serve_raw's
      outputs per document ([B]; answer_type_probs [B, 5]). All the
      documents' windows run through the model in one call."""
      name = "serve_raw_batch"
      inputs = dict(question=question, doc_tokens=doc_tokens,
                    doc_token_is_html=doc_token_is_html,
                    num_doc_tokens=num_doc_tokens,
                    candidate_starts=candidate_starts,
                    candidate_ends=candidate_ends,
                    candidate_top_level=candidate_top_level,
                    num_candidates=num_candidates)
      # The row checks first: the others broadcast over the batch.
      with tf.control_dependencies(batching.same_batch(name, inputs)):
        checks = batching.counts_fit(
            name, "num_doc_tokens", num_doc_tokens,
            {"doc_tokens": doc_tokens,
             "doc_token_is_html": doc_token_is_html})
        checks += batching.counts_fit(
            name, "num_candidates", num_candidates,
            {"candidate_starts": candidate_starts,
             "candidate_ends": candidate_ends,
             "candidate_top_level": candidate_top_level})
      rows = (question, doc_tokens, doc_token_is_html, num_doc_tokens,
              candidate_starts, candidate_ends, candidate_top_level,
              num_candidates)

      def tokens_of_row(row):
        _, tokens, is_html, n = row[:4]
        return tokens[:n], is_html[:n]

      def featurize_row(row):
        q, _, _, _, starts, ends, top, num_c = row
        tokens, is_html = tokens_of_row(row)
        return featurizer.featurize(
            q, tokens, is_html,
            *candidates_or_html(tokens, is_html, starts[:num_c],
                                ends[:num_c], top[:num_c]))

      with tf.control_dependencies(checks):
        return answer_batch(rows, featurize_row, tokens_of_row)

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="question"),
        tf.TensorSpec([None], tf.string, name="document_text")])
    def serve_text_batch(question, document_text):
      """B documents, question [B] and document_text [B] (TF Serving can
      batch requests) -> serve_text's outputs per document."""
      checks = batching.same_batch("serve_text_batch", {
          "question": question, "document_text": document_text})

      def featurize_row(row):
        q, text = row
        tokens, is_html = features_lib.split_document_text(text)
        starts, ends, top = features_lib.html_candidates(tokens, is_html)
        return featurizer.featurize(q, tokens, is_html, starts, ends, top)

      with tf.control_dependencies(checks):
        return answer_batch(
            (question, document_text), featurize_row,
            lambda row: features_lib.split_document_text(row[1]))

    signatures["serve_raw_batch"] = serve_raw_batch.get_concrete_function()
    signatures["serve_text_batch"] = serve_text_batch.get_concrete_function()
    return signatures

