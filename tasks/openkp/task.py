"""OpenKP: visual-feature embeddings, the n-gram head, loss, metrics, export.

Model (as the original ETC OpenKP model):

- VDOM visual features -> embeddings (`VdomEmbedding`, parameters of the task
  model, not of the encoder): x, y, width and height of the element and of
  its parent clipped to fixed ranges and scaled to [-1, 1], plus the
  inline/leaf and parent heading/leaf/bold indicators, through two gelu dense
  layers; the crossed block x heading x bold indicators and the bucketed
  element / parent font sizes through embedding tables. The sum is added to
  the global token embeddings (`global_embedding_adder`) and, gathered by
  element, to the long token embeddings (`long_embedding_adder`); each of the
  two is switchable.
- Head: wordpiece outputs summed into words, LayerNorm; for n = 1..5 a
  Conv1D of width n (gelu), LayerNorm and a bias-free Dense(1): one logit per
  (n, start word). Cells past the last word are masked.
- Loss: softmax cross-entropy over all cells; the gold mass is spread evenly
  over the gold phrases plus `additive_smoothing_mass` spread over the valid
  cells (the original spreads it over all cells, masked ones included, which
  only adds a constant), renormalized.
- Metrics: the official P/R/F1 at 1, 3, 5 on the top 5 distinct phrases
  (`decode.top_phrases`), per document, in the graph.
- Predictions: `predictions.jsonl` with `{"url", "KeyPhrases"}` lines.
"""

import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import gin
import tensorflow as tf
import tf_keras

from tasks import base
from tasks.openkp import decode
from tasks.openkp import evaluate as evaluate_lib
from tasks.openkp import features as openkp_features

NEG_INF = -1e9
# Font size cutoffs: font id = index of the first cutoff >= round(size);
# sizes above the last get the last id (the original's buckets).
FONT_SIZE_CUTOFFS: Tuple[int, ...] = (0,) + tuple(range(8, 25)) + (29, 34, 39,
                                                                    44, 49)
FONT_ID_VOCAB_SIZE = len(FONT_SIZE_CUTOFFS) + 1
# (min, max) clipping ranges of the coordinates, shared by element and parent.
DEFAULT_COORD_RANGES = {"x": (-50.0, 1500.0), "y": (-50.0, 6000.0),
                        "width": (0.0, 1500.0), "height": (0.0, 18000.0)}
# Positions in the 20 VDOM numbers (parent = +10).
_X, _WIDTH, _Y, _HEIGHT = 0, 1, 2, 3
_BLOCK, _INLINE, _HEADING, _LEAF, _FONT, _BOLD = 4, 5, 6, 7, 8, 9
_PARENT = 10
METRIC_NAMES: Tuple[str, ...] = tuple(
    f"{m}_at_{k}" for m in ("precision", "recall", "f1")
    for k in evaluate_lib.DEPTHS)


def _gelu(x):
  return tf.nn.gelu(x, approximate=True)


def font_ids(font_sizes: tf.Tensor) -> tf.Tensor:
  """<float>[...] font sizes -> <int32>[...] ids in [0, FONT_ID_VOCAB_SIZE)."""
  rounded = tf.round(tf.cast(font_sizes, tf.float32))  # half to even, as round
  cutoffs = tf.constant(FONT_SIZE_CUTOFFS, tf.float32)
  # Index of the first cutoff >= size = number of cutoffs below it (a
  # comparison, not searchsorted, so that XLA compiles it).
  return tf.reduce_sum(
      tf.cast(cutoffs < rounded[..., tf.newaxis], tf.int32), axis=-1)


def scale_to_unit(values: tf.Tensor, low: float, high: float) -> tf.Tensor:
  """Clips to [low, high], then maps that range linearly onto [-1, 1]."""
  clipped = tf.clip_by_value(values, low, high)
  return (clipped - (high + low) / 2) / ((high - low) / 2)


class VdomEmbedding(tf_keras.layers.Layer):
  """<float32>[B, G, 20] VDOM numbers -> [B, G, H] embeddings."""

  def __init__(self, hidden_size: int, initializer_range: float = 0.02,
               coord_ranges: Optional[Mapping[str, Sequence[float]]] = None,
               extra_dense_layers: int = 1, **kwargs):
    super().__init__(**kwargs)
    if extra_dense_layers not in (0, 1):
      raise ValueError(f"extra_dense_layers must be 0 or 1, got "
                       f"{extra_dense_layers}")
    self.hidden_size = hidden_size
    self.coord_ranges = dict(DEFAULT_COORD_RANGES, **(coord_ranges or {}))

    def init():
      return tf_keras.initializers.TruncatedNormal(stddev=initializer_range)

    # 2**3 ids: block x heading x bold of the element.
    self.indicator_cross = tf_keras.layers.Embedding(
        8, hidden_size, embeddings_initializer=init(),
        name="indicator_cross_embedding")
    self.font = tf_keras.layers.Embedding(
        FONT_ID_VOCAB_SIZE, hidden_size, embeddings_initializer=init(),
        name="font_embedding")
    self.parent_font = tf_keras.layers.Embedding(
        FONT_ID_VOCAB_SIZE, hidden_size, embeddings_initializer=init(),
        name="parent_font_embedding")
    self.dense_layers = [
        tf_keras.layers.Dense(hidden_size, activation=_gelu,
                              kernel_initializer=init(),
                              name=f"dense_features_{i}")
        for i in range(1 + extra_dense_layers)]

  def dense_inputs(self, vdom: tf.Tensor) -> tf.Tensor:
    """<float32>[..., 13]: 8 scaled coordinates and 5 plain indicators."""
    vdom = tf.cast(vdom, tf.float32)
    columns = []
    for offset in (0, _PARENT):
      for name, index in (("x", _X), ("y", _Y), ("width", _WIDTH),
                          ("height", _HEIGHT)):
        low, high = self.coord_ranges[name]
        columns.append(scale_to_unit(vdom[..., offset + index], low, high))
    for index in (_INLINE, _LEAF, _PARENT + _HEADING, _PARENT + _LEAF,
                  _PARENT + _BOLD):
      columns.append(vdom[..., index])
    return tf.stack(columns, axis=-1)

  def call(self, vdom: tf.Tensor) -> tf.Tensor:
    vdom = tf.cast(vdom, tf.float32)
    # Thresholded, so that serving inputs outside {0, 1} stay in the table.
    indicator = lambda i: tf.cast(vdom[..., i] > 0.5, tf.int32)
    cross = (indicator(_BLOCK) * 4 + indicator(_HEADING) * 2 +
             indicator(_BOLD))
    out = self.indicator_cross(cross)
    out += self.font(font_ids(vdom[..., _FONT]))
    out += self.parent_font(font_ids(vdom[..., _PARENT + _FONT]))
    dense = self.dense_inputs(vdom)
    for layer in self.dense_layers:
      dense = layer(dense)
    return out + tf.cast(dense, out.dtype)


def sum_wordpieces_into_words(long_output: tf.Tensor, long_word_ids: tf.Tensor,
                              long_input_mask: tf.Tensor) -> tf.Tensor:
  """<T>[B, L, H] wordpiece outputs -> [B, L, H] word sums (word axis = L)."""
  batch = tf.shape(long_output)[0]
  length = tf.shape(long_output)[1]
  hidden = long_output.shape[-1]
  masked = long_output * tf.cast(long_input_mask,
                                 long_output.dtype)[..., tf.newaxis]
  segments = (tf.cast(long_word_ids, tf.int32) +
              tf.range(batch)[:, tf.newaxis] * length)
  sums = tf.math.unsorted_segment_sum(
      tf.reshape(masked, [-1, hidden]), tf.reshape(segments, [-1]),
      batch * length)
  return tf.reshape(sums, [batch, length, hidden])


class OpenKPModel(base.EtcTaskModel):
  """Encoder (+ visual embeddings) + one logit per (n-gram length, word)."""

  def __init__(self, encoder, side_inputs_fn, hidden_size: int,
               initializer_range: float = 0.02,
               use_visual_features_in_global: bool = True,
               use_visual_features_in_long: bool = True,
               extra_dense_feature_layers: int = 1,
               coord_ranges: Optional[Mapping[str, Sequence[float]]] = None,
               max_phrase_words: int = openkp_features.MAX_PHRASE_WORDS,
               **kwargs):
    super().__init__(encoder, side_inputs_fn, **kwargs)
    self.use_visual_features_in_global = use_visual_features_in_global
    self.use_visual_features_in_long = use_visual_features_in_long
    self.max_phrase_words = max_phrase_words
    self.vdom_embedding = None
    if use_visual_features_in_global or use_visual_features_in_long:
      self.vdom_embedding = VdomEmbedding(
          hidden_size, initializer_range, coord_ranges,
          extra_dense_feature_layers, name="vdom_embedding")

    def norm(name):
      return tf_keras.layers.LayerNormalization(epsilon=1e-12, name=name)

    self.word_norm = norm("word_norm")
    self.ngram_convs, self.ngram_norms, self.ngram_logits = [], [], []
    for n in range(1, max_phrase_words + 1):
      self.ngram_convs.append(tf_keras.layers.Conv1D(
          hidden_size, n, padding="valid", activation=_gelu,
          kernel_initializer=tf_keras.initializers.TruncatedNormal(
              stddev=initializer_range / math.sqrt(n)),
          name=f"ngram{n}_conv"))
      self.ngram_norms.append(norm(f"ngram{n}_norm"))
      self.ngram_logits.append(tf_keras.layers.Dense(
          1, use_bias=False,
          kernel_initializer=tf_keras.initializers.TruncatedNormal(
              stddev=initializer_range),
          name=f"ngram{n}_logit"))

  def encode(self, features, training=None):
    """Adds the visual embeddings to the encoder inputs, then encodes."""
    inputs = dict(features)
    if self.vdom_embedding is not None:
      adder = self.vdom_embedding(features["global_vdom_features"])
      if self.use_visual_features_in_long:
        element = tf.maximum(tf.cast(features["long_sentence_ids"], tf.int32),
                             0)
        inputs["long_embedding_adder"] = tf.gather(adder, element,
                                                   batch_dims=1)
      if self.use_visual_features_in_global:
        inputs["global_embedding_adder"] = adder
    return super().encode(inputs, training=training)

  def head(self, features, long_output, global_output, training=None):
    """Returns float32 `logits` [B, N, L]: cell (n-1, s) scores the n-word
    phrase starting at word s; cells past the last word hold NEG_INF."""
    del global_output, training
    words = self.word_norm(sum_wordpieces_into_words(
        long_output, features["long_word_ids"], features["long_input_mask"]))
    word_mask = tf.cast(features["word_mask"], tf.bool)
    rows = []
    for i in range(self.max_phrase_words):
      logits = tf.squeeze(self.ngram_logits[i](self.ngram_norms[i](
          self.ngram_convs[i](words))), -1)  # [B, L - i]
      logits = tf.pad(tf.cast(logits, tf.float32), [[0, 0], [0, i]])
      # The phrase's last word, s + i, must be a kept word (a prefix mask).
      last_ok = tf.pad(word_mask[:, i:], [[0, 0], [0, i]])
      rows.append(tf.where(last_ok, logits, NEG_INF))
    return {"logits": tf.stack(rows, axis=1)}


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


@gin.configurable
class OpenKPTask(base.RawInputTask):
  """MS MARCO OpenKP keyphrase extraction (see `tasks/openkp/features.py`)."""

  name = "openkp"

  def __init__(self,
               vocab_file: Optional[str] = None,
               spm_model_file: Optional[str] = None,
               lower_case: bool = True,
               long_seq_len: int = 4096,
               global_seq_len: int = 512,
               use_visual_features_in_global: bool = True,
               use_visual_features_in_long: bool = True,
               extra_dense_feature_layers: int = 1,
               coord_ranges: Optional[Mapping[str, Sequence[float]]] = None,
               additive_smoothing_mass: float = 1e-4,
               num_candidates: int = decode.NUM_CANDIDATES,
               predict_reference: Optional[str] = None,
               **kwargs):
    """OpenKP settings.

    Args:
      vocab_file: the WordPiece vocab.txt used for preprocessing; needed for
        the raw-input signature `serve_raw`.
      spm_model_file: a SentencePiece model instead of `vocab_file`.
      lower_case: as in preprocessing.
      long_seq_len, global_seq_len: as in preprocessing (original 4096, 512).
      use_visual_features_in_global: add the VDOM embeddings to the global
        (element) tokens.
      use_visual_features_in_long: add each element's VDOM embedding to its
        long tokens.
      extra_dense_feature_layers: 0 or 1 extra gelu layers on the dense
        visual features (original 1).
      coord_ranges: overrides of `DEFAULT_COORD_RANGES`, e.g.
        {"y": (-50, 8000)}.
      additive_smoothing_mass: label smoothing mass (original 1e-4).
      num_candidates: best cells considered when decoding (original 100).
      predict_reference: optional jsonl with gold KeyPhrases (e.g. the
        `*.dedup.jsonl` written by preprocessing); predict then also writes
        the official scores to `metrics.json`.
      **kwargs: `base.Task` arguments (input patterns, model_config, ...).
    """
    super().__init__(long_seq_len=long_seq_len,
                     global_seq_len=global_seq_len, **kwargs)
    self.vocab_file = vocab_file
    self.spm_model_file = spm_model_file
    self.lower_case = lower_case
    self.use_visual_features_in_global = use_visual_features_in_global
    self.use_visual_features_in_long = use_visual_features_in_long
    self.extra_dense_feature_layers = extra_dense_feature_layers
    self.coord_ranges = dict(coord_ranges or {})
    self.additive_smoothing_mass = additive_smoothing_mass
    self.num_candidates = num_candidates
    self.predict_reference = predict_reference

  # ------------------------------------------------------------------ data
  def feature_spec(self):
    return openkp_features.feature_spec(self.long_seq_len,
                                        self.global_seq_len)

  def model_features(self) -> Tuple[str, ...]:
    return openkp_features.MODEL_FEATURES

  def side_inputs(self, features):
    # pylint: disable=g-import-not-at-top
    from etc_realformer.features import side_inputs as side_inputs_lib
    cfg = self.model_config
    return side_inputs_lib.make_global_local_side_inputs_from_example_ids(
        long_example_ids=features["long_input_mask"],
        global_example_ids=features["global_input_mask"],
        sentence_ids=features["long_sentence_ids"],
        local_radius=cfg.local_radius,
        relative_pos_max_distance=cfg.relative_pos_max_distance,
        use_hard_g2l_mask=cfg.use_hard_g2l_mask,
        use_hard_l2g_mask=cfg.use_hard_l2g_mask)

  # ----------------------------------------------------------------- model
  def build_model(self) -> OpenKPModel:
    cfg = self.model_config
    return OpenKPModel(
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
        logits > NEG_INF / 2, self.additive_smoothing_mass)
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
    (each keyphrase a one-string list, as the original); with
    `predict_reference`, also the official scores in `metrics.json`."""
    path = os.path.join(output_dir, "predictions.jsonl")
    predicted = {}
    with tf.io.gfile.GFile(path, "w") as f:
      for url, phrases in zip(predictions["url"], predictions["phrases"]):
        url = url.decode("utf-8")
        kps = [[p.decode("utf-8")] for p in phrases if p]
        predicted[url] = kps
        f.write(json.dumps({"url": url, "KeyPhrases": kps},
                           ensure_ascii=False) + "\n")
    if self.predict_reference:
      results = evaluate_lib.evaluate(
          evaluate_lib.read_keyphrases(self.predict_reference), predicted)
      with tf.io.gfile.GFile(os.path.join(output_dir, "metrics.json"),
                             "w") as f:
        json.dump(results, f, indent=2, sort_keys=True)
      print(f"openkp | {json.dumps(results, sort_keys=True)}", flush=True)
    return path

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
    return openkp_features.OpenKPFeaturizer(
        vocab_path=self.vocab_file, spm_model_path=self.spm_model_file,
        long_seq_len=self.long_seq_len, global_seq_len=self.global_seq_len,
        lower_case=self.lower_case)

  def raw_serving_signatures(self, model, featurizer, names):
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
      feats = featurizer.featurize_raw_tf(text, vdom)
      batch = {k: feats[k][tf.newaxis] for k in names}
      outputs = model(batch, training=False)
      phrases, scores, starts, lengths = decode.top_phrases(
          outputs["logits"], feats["words"][tf.newaxis],
          feats["num_words"][tf.newaxis], num_candidates=self.num_candidates)
      return {"key_phrases": phrases[0], "scores": scores[0],
              "starts": starts[0], "lengths": lengths[0]}

    signatures["serve_raw"] = serve_raw.get_concrete_function()
    return signatures
