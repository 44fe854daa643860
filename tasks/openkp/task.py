"""OpenKP: the task (data, loss, metrics, predictions, official scores,
export).

- Model (`head.OpenKPModel`): the ETC-RealFormer encoder with the VDOM
  visual embeddings, then one logit per (n-gram length, start word). Side
  inputs: the "input_masks" source (each long token attends its own VDOM
  element's global token).
- Loss: softmax cross-entropy over all cells; the gold mass is spread evenly
  over the gold phrases plus `additive_smoothing_mass` spread over the valid
  cells (the original spreads it over all cells, masked ones included, which
  only adds a constant), renormalized.
- Metrics: the official P/R/F1 at 1, 3, 5 on the top 5 distinct phrases
  (`decode.top_phrases`), per document, in the graph.
- Predictions: `predictions.jsonl` with `{"url", "KeyPhrases"}` lines;
  on the eval set `official_scores` scores them with the official metric
  (`evaluate.py`) against `gold_file`, into `metrics.json`.
"""

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf
import tf_keras

from etc_realformer.export import batching
from etc_realformer.training import task as task_lib
from tasks.common import output_files
from tasks.openkp import decode
from tasks.openkp import evaluate as evaluate_lib
from tasks.openkp import features as openkp_features
from tasks.openkp import head

# The in-graph metrics (the official ones of `evaluate.METRIC_NAMES`).
METRIC_NAMES: Tuple[str, ...] = tuple(
    f"{m}_at_{k}" for m in ("precision", "recall", "f1")
    for k in evaluate_lib.DEPTHS)
METRICS_FILE = "metrics.json"


def ngram_label_distribution(label_start: tf.Tensor, label_length: tf.Tensor,
                             valid_cells: tf.Tensor,
                             additive_smoothing_mass: float) -> tf.Tensor:
  """Target distribution over the flattened cells.

  Args:
    label_start: <int32>[B, K] gold start words, -1 padding.
    label_length: <int32>[B, K] gold lengths in [1, N], -1 padding.
    valid_cells: <bool>[B, N, L] cells that may be predicted.
    additive_smoothing_mass: total mass spread over the valid cells.

  Returns:
    <float32>[B, N * L], rows summing to 1 (all zeros for examples with no
    gold label).
  """
  batch = tf.shape(valid_cells)[0]
  length = tf.shape(valid_cells)[2]
  num_cells = valid_cells.shape[1] * length
  has = label_start >= 0
  cells = tf.where(has, (label_length - 1) * length + label_start, -1)
  gold = tf.minimum(tf.reduce_sum(
      tf.one_hot(cells, num_cells, dtype=tf.float32), axis=1), 1.0)
  num_gold = tf.reduce_sum(gold, axis=-1, keepdims=True)
  valid = tf.cast(tf.reshape(valid_cells, [batch, -1]), tf.float32)
  num_valid = tf.maximum(tf.reduce_sum(valid, axis=-1, keepdims=True), 1.0)
  smoothing = max(float(additive_smoothing_mass), 0.0)
  labels = gold / tf.maximum(num_gold, 1.0) + smoothing * valid / num_valid
  labels /= tf.maximum(tf.reduce_sum(labels, axis=-1, keepdims=True), 1e-12)
  return tf.where(num_gold > 0, labels, 0.0)


def keyphrase_scores(phrases: tf.Tensor, gold: tf.Tensor
                     ) -> Tuple[Dict[str, tf.Tensor], tf.Tensor]:
  """The official per-document scores, in the graph.

  Args:
    phrases: <string>[B, K] predictions, best first, distinct ("" = none).
    gold: <string>[B, R] normalized gold keyphrases ("" padding).

  Returns:
    (`METRIC_NAMES` -> <float32>[B], <float32>[B] weights: 1 for documents
    with at least one gold keyphrase).
  """
  gold_ok = tf.strings.length(gold) > 0
  # A repeated gold phrase counts once (the reference is a set).
  first = tf.linalg.band_part(tf.ones([tf.shape(gold)[1]] * 2, tf.bool), -1,
                              0) & ~tf.eye(tf.shape(gold)[1], dtype=tf.bool)
  repeated = tf.reduce_any(
      tf.equal(gold[:, :, None], gold[:, None, :]) & first[None], axis=-1)
  num_ref = tf.reduce_sum(tf.cast(gold_ok & ~repeated, tf.float32), axis=-1)
  hit = tf.reduce_any(
      tf.equal(phrases[:, :, None], gold[:, None, :]) & gold_ok[:, None, :],
      axis=-1) & (tf.strings.length(phrases) > 0)
  true_pos = tf.cumsum(tf.cast(hit, tf.float32), axis=-1)
  width = tf.shape(phrases)[1]
  out = {}
  for k in evaluate_lib.DEPTHS:
    tp = tf.gather(true_pos, tf.minimum(k, width) - 1, axis=1)
    p = tp / k
    r = tp / tf.maximum(num_ref, 1.0)
    out[f"precision_at_{k}"] = p
    out[f"recall_at_{k}"] = r
    out[f"f1_at_{k}"] = tf.math.divide_no_nan(2 * p * r, p + r)
  return out, tf.cast(num_ref > 0, tf.float32)


@task_lib.register_task("openkp")
class OpenKPTask(task_lib.RawInputTask):
  """MS MARCO OpenKP keyphrase extraction (see `tasks/openkp/features.py`)."""

  side_input_source = "input_masks"

  def __init__(self,
               long_seq_len: int = 4096,
               global_seq_len: int = 512,
               use_visual_features_in_global: bool = True,
               use_visual_features_in_long: bool = True,
               extra_dense_feature_layers: int = 1,
               coord_ranges: Optional[Mapping[str, Sequence[float]]] = None,
               additive_smoothing_mass: float = 1e-4,
               num_candidates: int = decode.NUM_CANDIDATES,
               gold_file: Optional[str] = None,
               **kwargs):
    """OpenKP settings.

    Args:
      long_seq_len, global_seq_len: as in preprocessing (original 4096, 512).
      use_visual_features_in_global: add the VDOM embeddings to the global
        (element) tokens.
      use_visual_features_in_long: add each element's VDOM embedding to its
        long tokens.
      extra_dense_feature_layers: 0 or 1 extra gelu layers on the dense
        visual features (original 1).
      coord_ranges: overrides of `head.DEFAULT_COORD_RANGES`, e.g.
        {"y": (-50, 8000)}; each a (low, high) pair with high > low.
      additive_smoothing_mass: label smoothing mass (original 1e-4).
      num_candidates: best cells considered when decoding (original 100).
      gold_file: the eval split's gold: a jsonl with `url` and `KeyPhrases`
        (e.g. the `*.dedup.jsonl` written by preprocessing);
        `official_scores` scores against it.
      **kwargs: `RawInputTask` arguments (vocab_file, spm_model_file,
        lower_case) and `Task` arguments (input patterns, model_config, ...).
    """
    super().__init__(long_seq_len=long_seq_len,
                     global_seq_len=global_seq_len, **kwargs)
    self.use_visual_features_in_global = use_visual_features_in_global
    self.use_visual_features_in_long = use_visual_features_in_long
    self.extra_dense_feature_layers = extra_dense_feature_layers
    # Checked here, when the configuration is read, not at the first step.
    self.coord_ranges = head.check_coord_ranges(coord_ranges,
                                                "OpenKPTask.coord_ranges")
    self.additive_smoothing_mass = additive_smoothing_mass
    self.num_candidates = num_candidates
    self.gold_file = gold_file

  # ------------------------------------------------------------------ data
  def feature_spec(self):
    return openkp_features.feature_spec(self.long_seq_len,
                                        self.global_seq_len)

  def model_features(self) -> Tuple[str, ...]:
    return openkp_features.MODEL_FEATURES

  # ----------------------------------------------------------------- model
  def build_model(self) -> head.OpenKPModel:
    cfg = self.model_config
    return head.OpenKPModel(
        self.build_encoder(), self.side_inputs, hidden_size=cfg.hidden_size,
        initializer_range=cfg.initializer_range,
        use_visual_features_in_global=self.use_visual_features_in_global,
        use_visual_features_in_long=self.use_visual_features_in_long,
        extra_dense_feature_layers=self.extra_dense_feature_layers,
        coord_ranges=self.coord_ranges, name="openkp_model")

  # -------------------------------------------------------- loss & metrics
  def per_example_loss(self, features, outputs) -> tf.Tensor:
    """Cross-entropy over all cells; 0 for examples without a gold label."""
    logits = outputs["logits"]
    batch = tf.shape(logits)[0]
    labels = ngram_label_distribution(
        tf.cast(features["label_start"], tf.int32),
        tf.cast(features["label_length"], tf.int32),
        logits > head.NEG_INF / 2, self.additive_smoothing_mass)
    loss = tf.nn.softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.reshape(logits, [batch, -1]))
    has_label = tf.reduce_any(features["label_start"] >= 0, axis=-1)
    return tf.where(has_label, loss, 0.0)

  def decode(self, features, outputs):
    """(phrases, scores, starts, lengths), each [B, 5]."""
    return decode.top_phrases(outputs["logits"], features["words"],
                              tf.cast(features["num_words"], tf.int32),
                              num_candidates=self.num_candidates)

  def build_metrics(self) -> List[tf_keras.metrics.Metric]:
    return [tf_keras.metrics.Mean(name, dtype=tf.float32)
            for name in METRIC_NAMES]

  def update_metrics(self, metrics, features, outputs) -> None:
    phrases = self.decode(features, outputs)[0]
    scores, weight = keyphrase_scores(phrases, features["keyphrases"])
    for metric in metrics:
      metric.update_state(scores[metric.name], sample_weight=weight)

  # ------------------------------------------------------------ predictions
  def prediction_outputs(self, features, outputs):
    phrases, scores, starts, lengths = self.decode(features, outputs)
    return {"url": features["url"], "phrases": phrases, "scores": scores,
            "starts": starts, "lengths": lengths}

  def write_predictions(self, predictions: Mapping[str, Any],
                        output_dir: str) -> str:
    """`predictions.jsonl`: one `{"url", "KeyPhrases"}` line per document
    (each keyphrase a one-string list, as the original); returns its path."""
    path = os.path.join(output_dir, "predictions.jsonl")
    with tf.io.gfile.GFile(path, "w") as f:
      for url, phrases in predicted_keyphrases(predictions).items():
        f.write(json.dumps({"url": url, "KeyPhrases": phrases},
                           ensure_ascii=False) + "\n")
    return path

  def has_official_scores(self) -> bool:
    return bool(self.gold_file)

  def official_scores(self, predictions: Mapping[str, Any],
                      output_dir: str) -> Optional[Dict[str, Any]]:
    """The official P/R/F1 at 1, 3, 5 of the eval set's predictions against
    `gold_file` (`evaluate.evaluate`), also written to
    `output_dir/metrics.json`. None without `gold_file`."""
    if not self.gold_file:
      logging.warning("OpenKPTask.gold_file is not set: no official OpenKP "
                      "scores")
      return None
    results = evaluate_lib.evaluate(
        evaluate_lib.read_keyphrases(self.gold_file),
        predicted_keyphrases(predictions))
    output_files.write_json(os.path.join(output_dir, METRICS_FILE), results,
                            sort_keys=True)
    return results

  # ----------------------------------------------------------------- export
  def serving_outputs(self, features, outputs):
    """`logits` [B, 5, L]; with the words (serve_examples), also the top
    `key_phrases`, `scores`, `starts`, `lengths` [B, 5]."""
    out = {"logits": outputs["logits"]}
    if "words" in features:
      phrases, scores, starts, lengths = self.decode(features, outputs)
      out.update(key_phrases=phrases, scores=scores, starts=starts,
                 lengths=lengths)
    return out

  def build_featurizer(self) -> openkp_features.OpenKPFeaturizer:
    return openkp_features.OpenKPFeaturizer(**self.featurizer_kwargs())

  def raw_serving_signatures(self, forward, featurizer, names):
    signatures = {}

    # Raw input = the released fields as they are: `text` and the `VDOM`
    # JSON string. The VDOM is read in the graph by regex
    # (`features.parse_vdom_tf`, only start_idx/end_idx/feature), so clients
    # need no JSON handling and the SavedModel needs no Python.
    @tf.function(input_signature=[
        tf.TensorSpec([], tf.string, name="text"),
        tf.TensorSpec([], tf.string, name="vdom")])
    def serve_raw(text, vdom):
      """One document -> the top 5 `key_phrases` [5] (lower-cased, "" when
      fewer), their `scores` [5] (cell probabilities), `starts`, `lengths`
      [5] (word positions, -1 when fewer)."""
      feats = featurizer.featurize(text, vdom, "serve_raw: `vdom`")
      batch = {k: feats[k][tf.newaxis] for k in names}
      outputs = forward(batch)
      phrases, scores, starts, lengths = decode.top_phrases(
          outputs["logits"], feats["words"][tf.newaxis],
          feats["num_words"][tf.newaxis], num_candidates=self.num_candidates)
      return {"key_phrases": phrases[0], "scores": scores[0],
              "starts": starts[0], "lengths": lengths[0]}

    name = "serve_raw_batch"
    length = self.long_seq_len

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="text"),
        tf.TensorSpec([None], tf.string, name="vdom")])
    def serve_raw_batch(text, vdom):
      """B documents, text [B] and vdom [B] (TF Serving can batch
      requests) -> serve_raw's outputs per document: `key_phrases`,
      `scores`, `starts`, `lengths` [B, 5]."""
      checks = batching.same_batch(name, {"text": text, "vdom": vdom})

      def featurize(row):
        text, vdom, index = row
        feats = featurizer.featurize(
            text, vdom,
            tf.strings.format(f"{name}: `vdom` of record {{}}", index))
        # The kept words (at most L) padded to L: one shape for every row.
        feats["words"] = batching.pad_vector(feats["words"], length, "")
        return {k: feats[k] for k in (*names, "words", "num_words")}

      specs = dict(batching.row_specs(self.model_input_spec(), names),
                   words=tf.TensorSpec([length], tf.string),
                   num_words=tf.TensorSpec([], tf.int32))
      with tf.control_dependencies(checks):
        feats = tf.map_fn(featurize, (text, vdom, tf.range(tf.size(text))),
                          fn_output_signature=specs)
      outputs = forward(feats)
      phrases, scores, starts, lengths = decode.top_phrases(
          outputs["logits"], feats["words"], feats["num_words"],
          num_candidates=self.num_candidates)
      return {"key_phrases": phrases, "scores": scores, "starts": starts,
              "lengths": lengths}

    signatures["serve_raw"] = serve_raw.get_concrete_function()
    signatures[name] = serve_raw_batch.get_concrete_function()
    return signatures


def predicted_keyphrases(predictions: Mapping[str, Any]
                         ) -> Dict[str, List[List[str]]]:
  """url -> the predicted KeyPhrases (one-string lists, best first) of the
  `prediction_outputs` arrays."""
  return {url.decode("utf-8"): [[p.decode("utf-8")] for p in phrases if p]
          for url, phrases in zip(predictions["url"], predictions["phrases"])}
