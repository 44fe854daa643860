"""WikiHop: the model head, loss, metric, predictions and serving signatures.

Model: ETC-RealFormer encoder, then one logit per global token (a Dense(1)
over `global_output`); the softmax runs over the candidate global tokens only
(`candidate_mask`; the others get a large negative logit, in float32 even
under mixed precision), trained with cross-entropy against `label` (the
answer's candidate index = its global index, as the candidates come first in
the global input). Metric: accuracy. `predict` writes the official submission
format, a JSON object `{id: answer}`.
"""

import json
import os
from typing import Any, Callable, List, Mapping, Optional, Tuple

import gin
import numpy as np
import tensorflow as tf
import tf_keras

from tasks import base
from tasks.wikihop import features as wikihop_features

# Logit given to non-candidate global tokens (float32, so no overflow).
NEG_INF = -1e9


class WikiHopModel(base.EtcTaskModel):
  """Encoder + one logit per global token, softmax support = candidates."""

  def __init__(self, encoder, side_inputs_fn, initializer_range: float = 0.02,
               **kwargs):
    super().__init__(encoder, side_inputs_fn, **kwargs)
    self.logits_layer = tf_keras.layers.Dense(
        1, kernel_initializer=tf_keras.initializers.TruncatedNormal(
            stddev=initializer_range),
        name="wikihop_logits")

  def head(self, features, long_output, global_output, training=None):
    """Returns float32 `logits` [B, G] (non-candidates at NEG_INF),
    `probabilities` [B, G] and the chosen global index `prediction` [B]."""
    del long_output, training
    logits = tf.cast(tf.squeeze(self.logits_layer(global_output), -1),
                     tf.float32)
    is_candidate = tf.cast(features["candidate_mask"], tf.bool)
    logits = tf.where(is_candidate, logits, NEG_INF)
    return {"logits": logits,
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "prediction": tf.argmax(logits, axis=-1, output_type=tf.int32)}


@gin.configurable
class WikiHopTask(base.RawInputTask):
  """qangaroo WikiHop multiple-choice QA (see `tasks/wikihop/features.py`)."""

  name = "wikihop"
  raw_signatures_name = "raw-text signature"

  def __init__(self,
               vocab_file: Optional[str] = None,
               spm_model_file: Optional[str] = None,
               lower_case: bool = True,
               long_seq_len: int = 4096,
               global_seq_len: int = 430,
               max_num_sentences: Optional[int] = None,
               mark_query_subject: bool = False,
               train_scaffold: Optional[Callable[[base.Features, tf.Tensor],
                                                 base.Features]] = None,
               **kwargs):
    """WikiHop settings.

    Args:
      vocab_file: the WordPiece vocab.txt used for preprocessing; needed for
        the raw-text signature `serve_raw` of the export.
      spm_model_file: a SentencePiece model instead of `vocab_file`.
      lower_case: as in preprocessing.
      long_seq_len, global_seq_len: as in preprocessing (original 4096, 430).
      max_num_sentences: as in preprocessing.
      mark_query_subject: as in preprocessing (type-2 document mentions of
        the query's subject); the raw-text signature featurizes the same way.
      train_scaffold: optional training-only curriculum (features, step) ->
        features, e.g. `scaffold.SyntheticBridgeScaffold` (the demo's).
      **kwargs: `base.Task` arguments (input patterns, model_config, ...).
    """
    super().__init__(long_seq_len=long_seq_len,
                     global_seq_len=global_seq_len, **kwargs)
    self.vocab_file = vocab_file
    self.spm_model_file = spm_model_file
    self.lower_case = lower_case
    self.max_num_sentences = max_num_sentences
    self.mark_query_subject = mark_query_subject
    self.train_scaffold = train_scaffold

  # ------------------------------------------------------------------ data
  def feature_spec(self):
    return wikihop_features.feature_spec(self.long_seq_len,
                                         self.global_seq_len)

  def model_features(self) -> Tuple[str, ...]:
    return tuple(wikihop_features.MODEL_FEATURES)

  def side_inputs(self, features):
    return base.multihop_side_inputs(self.model_config, features)

  # ----------------------------------------------------------------- model
  def build_model(self) -> WikiHopModel:
    return WikiHopModel(self.build_encoder(), self.side_inputs,
                        initializer_range=self.model_config.initializer_range,
                        name="wikihop_model")

  # -------------------------------------------------------- loss & metrics
  def train_features(self, features, step):
    if self.train_scaffold is None:
      return features
    return self.train_scaffold(features, step)

  def per_example_loss(self, features, outputs) -> tf.Tensor:
    """Cross-entropy over the candidates; 0 for unlabelled (-1) examples."""
    labels = tf.cast(features["label"], tf.int32)
    has_label = labels >= 0
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.maximum(labels, 0), logits=outputs["logits"])
    return tf.where(has_label, loss, 0.0)

  def build_metrics(self) -> List[tf_keras.metrics.Metric]:
    return [tf_keras.metrics.Mean("accuracy", dtype=tf.float32)]

  def update_metrics(self, metrics, features, outputs) -> None:
    labels = tf.cast(features["label"], tf.int32)
    correct = tf.cast(tf.equal(outputs["prediction"], labels), tf.float32)
    metrics[0].update_state(correct,
                            sample_weight=tf.cast(labels >= 0, tf.float32))

  # ------------------------------------------------------------ predictions
  def prediction_outputs(self, features, outputs):
    answer = tf.gather(features["candidates"], outputs["prediction"],
                       batch_dims=1)
    return {"example_id": features["example_id"], "answer": answer,
            "prediction": outputs["prediction"]}

  def write_predictions(self, predictions: Mapping[str, Any],
                        output_dir: str) -> str:
    """`{id: answer}` JSON (the official WikiHop submission format)."""
    result = {}
    for example_id, answer in zip(predictions["example_id"],
                                  predictions["answer"]):
      result[example_id.decode("utf-8")] = answer.decode("utf-8")
    path = os.path.join(output_dir, "predictions.json")
    with tf.io.gfile.GFile(path, "w") as f:
      json.dump(result, f, indent=1, sort_keys=True, ensure_ascii=False)
    return path

  # ----------------------------------------------------------------- export
  def serving_outputs(self, features, outputs):
    return {"logits": outputs["logits"],
            "probabilities": outputs["probabilities"],
            "prediction": outputs["prediction"]}

  def build_featurizer(self) -> wikihop_features.WikiHopFeaturizer:
    return wikihop_features.WikiHopFeaturizer(
        vocab_path=self.vocab_file, spm_model_path=self.spm_model_file,
        long_seq_len=self.long_seq_len, global_seq_len=self.global_seq_len,
        max_num_sentences=self.max_num_sentences,
        lower_case=self.lower_case,
        mark_query_subject=self.mark_query_subject)

  def raw_serving_signatures(self, model, featurizer, names):
    signatures = {}

    @tf.function(input_signature=[
        tf.TensorSpec([], tf.string, name="query"),
        tf.TensorSpec([None], tf.string, name="candidates"),
        tf.TensorSpec([None], tf.string, name="supports")])
    def serve_raw(query, candidates, supports):
      """One qangaroo record's fields -> `answer` [] (the chosen candidate,
      as given) and `candidate_probabilities` [N] (N = number of candidates
      that fit the global input)."""
      feats = featurizer.featurize_tf(query, candidates, supports)
      batch = {k: feats[k][tf.newaxis] for k in names}
      outputs = model(batch, training=False)
      num = tf.minimum(tf.size(candidates), self.global_seq_len)
      return {"answer": tf.gather(candidates, outputs["prediction"][0]),
              "candidate_probabilities": outputs["probabilities"][0, :num]}

    signatures["serve_raw"] = serve_raw.get_concrete_function()
    return signatures
