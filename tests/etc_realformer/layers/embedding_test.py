"""The input embeddings (`etc_realformer/layers/embedding.py`) against NumPy:
tables, defaults, projection, positions, sentence lengths, adders."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.layers.embedding import EmbeddingTable
from etc_realformer.layers.embedding import EtcEmbeddings
from etc_realformer.layers.normalization import EPSILON

V, H, SEGMENTS, B, L, G = 11, 6, 3, 2, 5, 3


def _layer_norm(x):
  mean = x.mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + EPSILON)


def _table(layer):
  return layer.embedding_table.numpy()


def _embeddings(**kwargs):
  layer = EtcEmbeddings(V, H, SEGMENTS, "glorot_uniform", **kwargs)
  layer.build()
  return layer


def _ids(seed=0):
  rng = np.random.RandomState(seed)
  return rng.randint(0, V, [B, L]), rng.randint(0, V, [B, G])


def _close(actual, expected):
  np.testing.assert_allclose(actual, expected, rtol=1e-5,
                             atol=1e-5 * np.abs(expected).max())


def test_sum_of_tables_then_layer_norm_per_side():
  layer = _embeddings()
  ids, global_ids = _ids()
  rng = np.random.RandomState(1)
  segments = rng.randint(0, SEGMENTS, [B, L])
  global_segments = rng.randint(0, SEGMENTS, [B, G])
  long_x, global_x = layer(ids, global_ids, segments, global_segments)
  token, segment = _table(layer.token_embedding), _table(
      layer.segment_embedding)
  _close(long_x.numpy(), _layer_norm(token[ids] + segment[segments]))
  _close(global_x.numpy(),
         _layer_norm(token[global_ids] + segment[global_segments]))


def test_default_segments_are_one_long_and_zero_global():
  layer = _embeddings()
  ids, global_ids = _ids()
  long_x, global_x = layer(tf.constant(ids), tf.constant(global_ids))
  token, segment = _table(layer.token_embedding), _table(
      layer.segment_embedding)
  _close(long_x.numpy(), _layer_norm(token[ids] + segment[1]))
  _close(global_x.numpy(), _layer_norm(token[global_ids] + segment[0]))


def test_embedding_size_adds_a_projection():
  layer = _embeddings(embedding_size=4)
  token = layer.token_embedding
  assert _table(token).shape == (V, 4)
  assert token.projection.kernel.shape == (4, H)
  ids, global_ids = _ids()
  long_x, _ = layer(ids, global_ids)
  projected = (_table(token)[ids] @ token.projection.kernel.numpy() +
               token.projection.bias.numpy())
  _close(long_x.numpy(),
         _layer_norm(projected + _table(layer.segment_embedding)[1]))
  assert {"token_emb_lookup/projection/kernel",
          "token_emb_lookup/projection/bias"} <= set(
              layer.official_variables())
  # The same width as the hidden size: no projection.
  assert _embeddings(embedding_size=H).token_embedding.projection is None


def test_absolute_positions_default_to_the_first_rows():
  layer = _embeddings(max_absolute_position_embeddings=8)
  ids, global_ids = _ids()
  long_x, global_x = layer(ids, global_ids)
  token, segment = _table(layer.token_embedding), _table(
      layer.segment_embedding)
  _close(long_x.numpy(), _layer_norm(
      token[ids] + segment[1] + _table(layer.long_position_embedding)[:L]))
  _close(global_x.numpy(), _layer_norm(
      token[global_ids] + segment[0] +
      _table(layer.global_position_embedding)[:G]))
  # Explicit ids pick rows.
  positions = np.array([[7, 0, 1, 1, 2]] * B)
  long_x, _ = layer(ids, global_ids, position_ids=positions)
  _close(long_x.numpy(), _layer_norm(
      token[ids] + segment[1] + _table(layer.long_position_embedding)[
          positions]))


def test_absolute_positions_under_a_dynamic_length():
  layer = _embeddings(max_absolute_position_embeddings=8)
  ids, global_ids = _ids()
  fn = tf.function(layer.call, input_signature=[
      tf.TensorSpec([None, None], tf.int64)] * 2)
  _close(fn(ids, global_ids)[0].numpy(), layer(ids, global_ids)[0].numpy())


def test_positions_need_a_position_table():
  ids, global_ids = _ids()
  with pytest.raises(ValueError, match="max_absolute_position_embeddings "
                     "is 0"):
    _embeddings()(ids, global_ids, global_position_ids=global_ids)


def test_sentence_lengths_and_adders_join_the_global_side():
  layer = _embeddings(max_sentence_length_embeddings=4)
  ids, global_ids = _ids()
  rng = np.random.RandomState(2)
  long_adder = rng.normal(size=[B, L, H]).astype(np.float32)
  global_adder = rng.normal(size=[B, G, H]).astype(np.float32)
  lengths = np.array([[0, 3, 9], [1, 2, 4]])
  long_x, global_x = layer(ids, global_ids, long_embedding_adder=long_adder,
                           global_embedding_adder=global_adder,
                           global_sentence_lengths=lengths)
  token, segment = _table(layer.token_embedding), _table(
      layer.segment_embedding)
  # Lengths past the table share its last row.
  length_rows = _table(layer.sentence_length_embedding)[np.minimum(lengths,
                                                                   3)]
  _close(long_x.numpy(), _layer_norm(token[ids] + segment[1] + long_adder))
  _close(global_x.numpy(), _layer_norm(
      token[global_ids] + segment[0] + length_rows + global_adder))


def test_sentence_lengths_given_exactly_with_their_table():
  ids, global_ids = _ids()
  lengths = np.ones([B, G], np.int32)
  with pytest.raises(ValueError, match="global_sentence_lengths must be "
                     "given exactly when max_sentence_length_embeddings > 0"):
    _embeddings()(ids, global_ids, global_sentence_lengths=lengths)
  with pytest.raises(ValueError, match="global_sentence_lengths"):
    _embeddings(max_sentence_length_embeddings=4)(ids, global_ids)


def test_official_names():
  layer = _embeddings(max_absolute_position_embeddings=8,
                      max_sentence_length_embeddings=4)
  names = layer.official_variables()
  assert sorted(names) == [
      "global_emb_layer_norm/beta", "global_emb_layer_norm/gamma",
      "long_emb_layer_norm/beta", "long_emb_layer_norm/gamma",
      "position_emb_lookup_global/embedding_table",
      "position_emb_lookup_long/embedding_table",
      "segment_emb_lookup/embedding_table",
      "sentence_length_emb_lookup/embedding_table",
      "token_emb_lookup/embedding_table"]
  assert names["token_emb_lookup/embedding_table"].shape == (V, H)
  assert names["sentence_length_emb_lookup/embedding_table"].shape == (4, H)


def test_table_in_the_compute_dtype():
  table = EmbeddingTable(V, H, "glorot_uniform", dtype="mixed_bfloat16")
  table.build()
  assert table.embedding_table.dtype == tf.float32
  out = table(tf.constant([[1, 2]]))
  assert out.dtype == tf.bfloat16
  np.testing.assert_allclose(out.numpy().astype(np.float32),
                             _table(table)[np.array([[1, 2]])], rtol=1e-2)
