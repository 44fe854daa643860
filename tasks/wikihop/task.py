"""WikiHop (qangaroo): the registered task, `@register_task("wikihop")`.

Data: the TFRecords of `preprocess.py` (`features.feature_spec`); side
inputs from the paragraph / sentence side-input source ("multihop"). Model:
`head.WikiHopModel` (one logit per candidate global token). Loss:
cross-entropy over the candidates against `label` (the answer's candidate
index); unlabelled examples add 0. Metric: accuracy. Predictions: the
official submission format, a JSON object `{id: answer}`; on the eval set,
`official_scores` is the official metric (`evaluate.py`: accuracy) against
the gold answers, from `gold_file` or else the labels stored in the
TFRecords. Export: besides the tensor signatures, `serve_raw(query,
candidates, sentences, num_sentences)`, which featurizes in the graph (needs
`vocab_file` or `spm_model_file`), and `serve_raw_batch`, the same for a
batch of records, padded, with counts; the client splits the supports into
sentences first with `features.split_supports` (Punkt, as preprocessing
does); `client.py` builds `serve_raw_batch`'s inputs from qangaroo records.
"""

import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

import tensorflow as tf
import tf_keras

from etc_realformer.export import batching
from etc_realformer.training import task as task_lib
from tasks.common import output_files
from tasks.wikihop import decode
from tasks.wikihop import evaluate
from tasks.wikihop import features as wikihop_features
from tasks.wikihop import head

PREDICTIONS_FILE = "predictions.json"


@task_lib.register_task("wikihop")
class WikiHopTask(task_lib.RawInputTask):
  """qangaroo WikiHop multiple-choice QA (see `tasks/wikihop/features.py`)."""

  side_input_source = wikihop_features.SEGMENT_PLAN.side_input_source
  raw_signatures_name = "raw-text signature"

  def __init__(self,
               long_seq_len: int = 4096,
               global_seq_len: int = 430,
               max_num_sentences: Optional[int] = None,
               mark_query_subject: bool = False,
               gold_file: Optional[str] = None,
               **kwargs):
    """WikiHop settings.

    Args:
      long_seq_len, global_seq_len: as in preprocessing (original 4096, 430).
      max_num_sentences: as in preprocessing.
      mark_query_subject: as in preprocessing (type-2 document mentions of
        the query's subject); the raw-text signature featurizes the same way.
      gold_file: the qangaroo file of the eval set, for `official_scores`
        over every gold record (default: the labels in the TFRecords, i.e.
        the records preprocessing kept).
      **kwargs: `RawInputTask` arguments (vocab_file, spm_model_file,
        lower_case) and `Task` arguments (input patterns, model_config, ...).
    """
    super().__init__(long_seq_len=long_seq_len,
                     global_seq_len=global_seq_len, **kwargs)
    self.max_num_sentences = max_num_sentences
    self.mark_query_subject = mark_query_subject
    self.gold_file = gold_file

  # ------------------------------------------------------------------ data
  def feature_spec(self):
    return wikihop_features.feature_spec(self.long_seq_len,
                                         self.global_seq_len)

  def model_features(self) -> Tuple[str, ...]:
    return tuple(wikihop_features.MODEL_FEATURES)

  # ----------------------------------------------------------------- model
  def build_model(self) -> head.WikiHopModel:
    return head.WikiHopModel(
        self.build_encoder(), self.side_inputs,
        initializer_range=self.model_config.initializer_range,
        name="wikihop_model")

  # -------------------------------------------------------- loss & metrics
  def per_example_loss(self, features, outputs) -> tf.Tensor:
    """Cross-entropy over the candidates; 0 for unlabelled (-1) examples."""
    labels = tf.cast(features[wikihop_features.LABEL], tf.int32)
    has_label = labels >= 0
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.maximum(labels, 0), logits=outputs["logits"])
    return tf.where(has_label, loss, 0.0)

  def build_metrics(self) -> List[tf_keras.metrics.Metric]:
    return [tf_keras.metrics.Mean("accuracy", dtype=tf.float32)]

  def update_metrics(self, metrics, features, outputs) -> None:
    labels = tf.cast(features[wikihop_features.LABEL], tf.int32)
    correct = tf.cast(tf.equal(outputs["prediction"], labels), tf.float32)
    metrics[0].update_state(correct,
                            sample_weight=tf.cast(labels >= 0, tf.float32))

  # ------------------------------------------------------------ predictions
  def prediction_outputs(self, features, outputs):
    """The id, the chosen candidate, its index and the gold answer ("" when
    unlabelled), per example."""
    candidates = features[wikihop_features.CANDIDATES]
    return {"example_id": features[wikihop_features.EXAMPLE_ID],
            "answer": decode.chosen_candidate(candidates,
                                              outputs["prediction"]),
            "gold_answer": decode.chosen_candidate(
                candidates,
                tf.cast(features[wikihop_features.LABEL], tf.int32)),
            "prediction": outputs["prediction"]}

  def write_predictions(self, predictions: Mapping[str, Any],
                        output_dir: str) -> str:
    """`{id: answer}` JSON (the official WikiHop submission format)."""
    path = os.path.join(output_dir, PREDICTIONS_FILE)
    output_files.write_json(path, decode.by_id(predictions["example_id"],
                                               predictions["answer"]),
                       sort_keys=True)
    return path

  def official_scores(self, predictions: Mapping[str, Any],
                      output_dir: str) -> Optional[Dict[str, Any]]:
    """Accuracy of the predictions (`evaluate.evaluate`) against the gold
    answers of `gold_file`, else those stored in the TFRecords; None when
    there is no gold."""
    del output_dir
    if self.gold_file:
      gold = evaluate.gold_answers(self.gold_file)
    else:
      gold = {k: v for k, v in decode.by_id(
          predictions["example_id"], predictions["gold_answer"]).items() if v}
    if not gold:
      return None
    return evaluate.evaluate(
        decode.by_id(predictions["example_id"], predictions["answer"]), gold)

  # ----------------------------------------------------------------- export
  def serving_outputs(self, features, outputs):
    return {"logits": outputs["logits"],
            "probabilities": outputs["probabilities"],
            "prediction": outputs["prediction"]}

  def build_featurizer(self) -> wikihop_features.WikiHopFeaturizer:
    return wikihop_features.WikiHopFeaturizer(
        max_num_sentences=self.max_num_sentences,
        mark_query_subject=self.mark_query_subject,
        **self.featurizer_kwargs())

  def raw_serving_signatures(self, forward, featurizer, names):
    one_record = [tf.TensorSpec([], tf.string),
                  tf.TensorSpec([None], tf.string),
                  tf.TensorSpec([None], tf.string),
                  tf.TensorSpec([None], tf.int32)]

    # One record's model features; both signatures call this one trace.
    @tf.function(input_signature=one_record)
    def featurize(query, candidates, sentences, num_sentences):
      feats = featurizer.featurize(query, candidates, sentences,
                                                num_sentences)
      return {k: feats[k] for k in names}

    @tf.function(input_signature=[
        tf.TensorSpec([], tf.string, name="query"),
        tf.TensorSpec([None], tf.string, name="candidates"),
        tf.TensorSpec([None], tf.string, name="sentences"),
        tf.TensorSpec([None], tf.int32, name="num_sentences")])
    def serve_raw(query, candidates, sentences, num_sentences):
      """One qangaroo record's fields, its supports split into sentences
      (`features.split_supports`: [S] sentences, [D] sentences per support)
      -> `answer` [] (the chosen candidate, as given) and
      `candidate_probabilities` [C]. A record that cannot be answered
      whole (no candidate, more than G, counts that disagree with
      `sentences`, text that is not UTF-8) fails the request
      (`WikiHopFeaturizer.input_checks`)."""
      checks = featurizer.input_checks("serve_raw", query, candidates,
                                       sentences, num_sentences)
      with tf.control_dependencies(checks):
        feats = featurize(query, candidates, sentences, num_sentences)
      outputs = forward({k: v[tf.newaxis] for k, v in feats.items()})
      num = tf.minimum(tf.size(candidates), self.global_seq_len)
      return {"answer": tf.gather(candidates, outputs["prediction"][0]),
              "candidate_probabilities": outputs["probabilities"][0, :num]}

    name = "serve_raw_batch"

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="query"),
        tf.TensorSpec([None, None], tf.string, name="candidates"),
        tf.TensorSpec([None], tf.int32, name="num_candidates"),
        tf.TensorSpec([None, None], tf.string, name="sentences"),
        tf.TensorSpec([None, None], tf.int32, name="num_sentences"),
        tf.TensorSpec([None], tf.int32, name="num_supports")])
    def serve_raw_batch(query, candidates, num_candidates, sentences,
                        num_sentences, num_supports):
      """B records, every input [B, ...] (TF Serving can batch requests):
      query [B]; candidates [B, C], padded past num_candidates [B];
      num_sentences [B, D] (sentences per support), padded past
      num_supports [B]; sentences [B, S] (all the record's supports'
      sentences in order), padded past their sum; padding of any value.
      `client.batch_inputs` builds them from qangaroo records. ->
      serve_raw's outputs per record: `answer` [B] and
      `candidate_probabilities` [B, C] (0 past the record's candidates).
      A record that serve_raw refuses fails the request, its index
      named."""
      inputs = dict(query=query, candidates=candidates,
                    num_candidates=num_candidates, sentences=sentences,
                    num_sentences=num_sentences, num_supports=num_supports)
      # The row checks first: the others broadcast over the batch.
      with tf.control_dependencies(batching.same_batch(name, inputs)):
        counted_sentences = batching.counted(num_sentences, num_supports)
        record_sentences = tf.reduce_sum(counted_sentences, axis=1)
        checks = batching.counts_fit(name, "num_candidates", num_candidates,
                                     {"candidates": candidates})
        checks += batching.counts_fit(name, "num_supports", num_supports,
                                      {"num_sentences": num_sentences})
        checks += batching.non_negative(name, "num_sentences",
                                        counted_sentences)
        checks += batching.counts_fit(name, "num_sentences",
                                      record_sentences,
                                      {"sentences": sentences}, summed=True)

      def featurize_row(row):
        index, q, c, num_c, s, num_s, num_d = row
        num_s = num_s[:num_d]
        c, s = c[:num_c], s[:tf.reduce_sum(num_s)]
        with tf.control_dependencies(featurizer.input_checks(
            name, q, c, s, num_s, record=index)):
          return featurize(q, c, s, num_s)

      with tf.control_dependencies(checks):
        batch = tf.map_fn(
            featurize_row, (tf.range(tf.size(query)), query, candidates,
                            num_candidates, sentences, num_sentences,
                            num_supports),
            fn_output_signature=batching.row_specs(
                self.model_input_spec(), names))
      outputs = forward(batch)
      width = tf.shape(candidates)[1]
      scored = tf.sequence_mask(
          tf.minimum(num_candidates, self.global_seq_len), width)
      probabilities = batching.pad_rows(outputs["probabilities"], width, 0.0)
      return {"answer": tf.gather(candidates, outputs["prediction"],
                                  batch_dims=1),
              "candidate_probabilities": tf.where(scored, probabilities,
                                                  0.0)}

    return {"serve_raw": serve_raw.get_concrete_function(),
            name: serve_raw_batch.get_concrete_function()}
