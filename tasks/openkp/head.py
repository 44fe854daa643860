"""The OpenKP model (as the original ETC OpenKP model).

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
  (n, start word). Cells past the last word are masked (NEG_INF).
"""

import math
import numbers
from typing import Dict, Mapping, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras

from etc_realformer.errors import UserInputError
from etc_realformer.layers import activations
from etc_realformer.training import task as task_lib
from tasks.common.featurization import logits as logits_lib
from tasks.openkp import features as features_lib

# Logit of cells past the last word.
NEG_INF = logits_lib.NEG_INF
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


def check_coord_ranges(coord_ranges: Optional[Mapping[str, Sequence[float]]],
                       setting: str = "VdomEmbedding.coord_ranges"
                       ) -> Dict[str, Tuple[float, float]]:
  """`DEFAULT_COORD_RANGES` with the overrides of `coord_ranges`, checked.

  Each override must name a coordinate of `DEFAULT_COORD_RANGES` and be a
  pair of finite numbers (low, high) with high > low: an empty range divides
  by zero (NaN losses) and a reversed one clips every value to one constant.

  Args:
    coord_ranges: name -> (low, high) overrides, or None.
    setting: the configuration setting they come from, for the messages.

  Returns:
    name -> (low, high) for all four coordinates.

  Raises:
    UserInputError: naming the setting, the key and the bad value.
  """
  if coord_ranges is None:
    coord_ranges = {}
  if not isinstance(coord_ranges, Mapping):
    raise UserInputError(
        f"{setting} = {coord_ranges!r}: expected a dict of coordinate name "
        f"-> (low, high), e.g. {{'y': (-50, 8000)}}")
  out = dict(DEFAULT_COORD_RANGES)
  for name, value in coord_ranges.items():
    where = f"{setting}[{name!r}]"
    if name not in DEFAULT_COORD_RANGES:
      raise UserInputError(
          f"{where}: unknown coordinate; known: "
          f"{', '.join(sorted(DEFAULT_COORD_RANGES))}")
    if (isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or
        len(value) != 2 or
        not all(isinstance(v, numbers.Real) and not isinstance(v, bool) and
                math.isfinite(v) for v in value)):
      raise UserInputError(
          f"{where} = {value!r}: expected a (low, high) pair of finite "
          "numbers")
    low, high = float(value[0]), float(value[1])
    if not high > low:
      raise UserInputError(
          f"{where} = {value!r}: high must be above low (the range scales "
          "the coordinate to [-1, 1])")
    out[name] = (low, high)
  return out


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
               extra_dense_layers: int = 1,
               coord_ranges_setting: str = "VdomEmbedding.coord_ranges",
               **kwargs):
    """Args: `coord_ranges`: overrides of `DEFAULT_COORD_RANGES`, checked by
    `check_coord_ranges` (messages name `coord_ranges_setting`)."""
    super().__init__(**kwargs)
    if extra_dense_layers not in (0, 1):
      raise UserInputError(f"extra_dense_layers must be 0 or 1, got "
                           f"{extra_dense_layers}")
    self.hidden_size = hidden_size
    self.coord_ranges = check_coord_ranges(coord_ranges,
                                           coord_ranges_setting)

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
        tf_keras.layers.Dense(hidden_size, activation=activations.gelu,
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


class OpenKPModel(task_lib.EtcTaskModel):
  """Encoder (+ visual embeddings) + one logit per (n-gram length, word)."""

  def __init__(self, encoder, side_inputs_fn, hidden_size: int,
               initializer_range: float = 0.02,
               use_visual_features_in_global: bool = True,
               use_visual_features_in_long: bool = True,
               extra_dense_feature_layers: int = 1,
               coord_ranges: Optional[Mapping[str, Sequence[float]]] = None,
               max_phrase_words: int = features_lib.MAX_PHRASE_WORDS,
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
          hidden_size, n, padding="valid", activation=activations.gelu,
          kernel_initializer=tf_keras.initializers.TruncatedNormal(
              stddev=initializer_range / math.sqrt(n)),
          name=f"ngram{n}_conv"))
      self.ngram_norms.append(norm(f"ngram{n}_norm"))
      self.ngram_logits.append(tf_keras.layers.Dense(
          1, use_bias=False,
          kernel_initializer=tf_keras.initializers.TruncatedNormal(
              stddev=initializer_range),
          name=f"ngram{n}_logit"))

  def encoder_inputs(self, features):
    """The features plus the visual embeddings the switches ask for:
    `global_embedding_adder` [B, G, H] (each element's) and / or
    `long_embedding_adder` [B, L, H] (each long token's element's)."""
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
    return inputs

  def encode(self, features, training=None):
    """Adds the visual embeddings to the encoder inputs, then encodes."""
    return super().encode(self.encoder_inputs(features), training=training)

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
