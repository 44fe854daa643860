"""ETC input embeddings for the long and the global sequences.

One token table serves both sequences (so wordpieces can sit in the global
input), one segment table too; each sequence has its own LayerNorm and,
optionally, its own absolute position table; the global input, optionally, a
table of sentence lengths. With `embedding_size` != hidden size the token
lookup is followed by an ALBERT-style projection.
"""

from typing import Dict, Optional

import tensorflow as tf
import tf_keras

from etc_realformer.layers.initializers import fresh_initializer
from etc_realformer.layers.normalization import layer_norm
from etc_realformer.layers.projections import Linear


class EmbeddingTable(tf_keras.layers.Layer):
  """A lookup table <float>[vocab, width], optionally projected to `hidden`."""

  def __init__(self, vocab_size: int, width: int, initializer,
               projection_size: Optional[int] = None, **kwargs):
    super().__init__(**kwargs)
    self.vocab_size = vocab_size
    self.width = width
    self.initializer = initializer
    self.projection = (Linear(projection_size, initializer, name="projection")
                       if projection_size is not None else None)

  def build(self, input_shape=None):
    self.embedding_table = self.add_weight(
        "embedding_table", [self.vocab_size, self.width],
        initializer=fresh_initializer(self.initializer))
    if self.projection is not None:
      self.projection.build(tf.TensorShape([None, None, self.width]))
    super().build(input_shape)

  def call(self, ids: tf.Tensor) -> tf.Tensor:
    """<int32>[B, N] -> <T>[B, N, width or projection_size]."""
    out = tf.gather(tf.cast(self.embedding_table, self.compute_dtype), ids)
    if self.projection is not None:
      out = self.projection(out)
    return out

  def official_variables(self) -> Dict[str, tf.Variable]:
    out = {"embedding_table": self.embedding_table}
    if self.projection is not None:
      out["projection/kernel"] = self.projection.kernel
      out["projection/bias"] = self.projection.bias
    return out


class EtcEmbeddings(tf_keras.layers.Layer):
  """Token + segment (+ position, + sentence length on the global input,
  + adder) embeddings, each input (long, global) normalized on its own."""

  def __init__(self, vocab_size: int, hidden_size: int,
               segment_vocab_size: int, initializer,
               embedding_size: Optional[int] = None,
               max_absolute_position_embeddings: int = 0,
               max_sentence_length_embeddings: int = 0, **kwargs):
    """Args as the `EtcConfig` fields of the same names (`embedding_size`
    None or equal to `hidden_size`: no projection)."""
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    init = initializer
    width = embedding_size or hidden_size
    projection = hidden_size if width != hidden_size else None
    self.token_embedding = EmbeddingTable(
        vocab_size, width, init, projection_size=projection,
        name="token_emb_lookup")
    self.segment_embedding = EmbeddingTable(
        segment_vocab_size, hidden_size, init, name="segment_emb_lookup")
    if max_absolute_position_embeddings:
      self.long_position_embedding = EmbeddingTable(
          max_absolute_position_embeddings, hidden_size, init,
          name="position_emb_lookup_long")
      self.global_position_embedding = EmbeddingTable(
          max_absolute_position_embeddings, hidden_size, init,
          name="position_emb_lookup_global")
    else:
      self.long_position_embedding = self.global_position_embedding = None
    self.sentence_length_embedding = None
    if max_sentence_length_embeddings:
      self.sentence_length_embedding = EmbeddingTable(
          max_sentence_length_embeddings, hidden_size, init,
          name="sentence_length_emb_lookup")
    self.long_norm = layer_norm("long_emb_layer_norm")
    self.global_norm = layer_norm("global_emb_layer_norm")

  def build(self, input_shape=None):
    for layer in self._tables():
      if layer is not None:
        layer.build()
    hidden = tf.TensorShape([None, None, self.hidden_size])
    self.long_norm.build(hidden)
    self.global_norm.build(hidden)
    super().build(input_shape)

  def _tables(self):
    return (self.token_embedding, self.segment_embedding,
            self.long_position_embedding, self.global_position_embedding,
            self.sentence_length_embedding)

  def _embed(self, ids, segment_ids, position_table, position_ids, adder,
             norm):
    x = self.token_embedding(ids)
    x += self.segment_embedding(segment_ids)
    if position_table is not None:
      if position_ids is None:
        length = ids.shape[1] if ids.shape[1] is not None else tf.shape(ids)[1]
        table = tf.cast(position_table.embedding_table, x.dtype)
        x += table[tf.newaxis, :length, :]
      else:
        x += position_table(position_ids)
    if adder is not None:
      x += tf.cast(adder, x.dtype)
    return norm(x)

  def call(self, token_ids, global_token_ids, segment_ids=None,
           global_segment_ids=None, position_ids=None,
           global_position_ids=None, long_embedding_adder=None,
           global_embedding_adder=None, global_sentence_lengths=None):
    """Embeds both sequences.

    Args:
      token_ids: <int32>[B, L].
      global_token_ids: <int32>[B, G].
      segment_ids: <int32>[B, L], default all 1 (as the original).
      global_segment_ids: <int32>[B, G], default all 0.
      position_ids / global_position_ids: <int32>[B, L] / [B, G]; default
        0..N-1 when absolute positions are on (must be None otherwise).
      long_embedding_adder / global_embedding_adder: <float>[B, N, hidden]
        added before the LayerNorm (e.g. OpenKP's visual features).
      global_sentence_lengths: <int32>[B, G], each global token's number of
        long tokens; required with a sentence length table (clipped to its
        last row), else must be None.

    Returns:
      (<T>[B, L, hidden], <T>[B, G, hidden]), before dropout.
    """
    if segment_ids is None:
      segment_ids = tf.ones_like(token_ids)
    if global_segment_ids is None:
      global_segment_ids = tf.zeros_like(global_token_ids)
    if self.long_position_embedding is None and (
        position_ids is not None or global_position_ids is not None):
      raise ValueError("position_ids/global_position_ids given but "
                       "max_absolute_position_embeddings is 0")
    if (self.sentence_length_embedding is None) != (
        global_sentence_lengths is None):
      raise ValueError("global_sentence_lengths must be given exactly when "
                       "max_sentence_length_embeddings > 0")
    if global_sentence_lengths is not None:
      rows = self.sentence_length_embedding.vocab_size
      length_x = self.sentence_length_embedding(
          tf.minimum(tf.cast(global_sentence_lengths, tf.int32), rows - 1))
      global_embedding_adder = (
          length_x if global_embedding_adder is None else
          length_x + tf.cast(global_embedding_adder, length_x.dtype))
    long_x = self._embed(token_ids, segment_ids, self.long_position_embedding,
                         position_ids, long_embedding_adder, self.long_norm)
    global_x = self._embed(global_token_ids, global_segment_ids,
                           self.global_position_embedding,
                           global_position_ids, global_embedding_adder,
                           self.global_norm)
    return long_x, global_x

  def official_variables(self) -> Dict[str, tf.Variable]:
    out = {}
    for layer in self._tables():
      if layer is not None:
        for suffix, var in layer.official_variables().items():
          out[f"{layer.name}/{suffix}"] = var
    for norm in (self.long_norm, self.global_norm):
      out[f"{norm.name}/gamma"] = norm.gamma
      out[f"{norm.name}/beta"] = norm.beta
    return out
