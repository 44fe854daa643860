"""Relative position embeddings and biases of one branch.

ETC adds to each score q.k a relative term q.e[id] + bias[id, head], where
`id` is the pair's relative id (a distance, "same sentence", ...; see
`etc_realformer.features.relative_positions`). There are few ids (R, e.g.
32), so the terms are computed once per query for every id
(`RelativeTable.scores_per_id`, [B, N, R, H]) and then picked per key
(`relative_scores`), never as an [N, K, D] tensor.
"""

from typing import Dict, Mapping, Optional, Sequence, Union

import numpy as np
import tensorflow as tf
import tf_keras

from etc_realformer.layers.xla_context import in_xla_context


class RelativeTable(tf_keras.layers.Layer):
  """The relative embeddings <float>[R, H, D] and biases [R, H] of one branch.

  Weight names as the released checkpoints: `relative_emb_table`,
  `relative_bias_table`.
  """

  def __init__(self, relative_vocab_size: int, num_heads: int,
               size_per_head: int,
               initial_biases: Optional[Mapping[
                   int, Union[float, Sequence[float]]]] = None,
               **kwargs):
    """`initial_biases`: {relative id: initial bias, one for all heads or
    one per head}; others 0."""
    super().__init__(**kwargs)
    self.relative_vocab_size = relative_vocab_size
    self.num_heads = num_heads
    self.size_per_head = size_per_head
    # A plain array, not a dict of lists: Keras would track those as
    # checkpoint dependencies, which cannot have integer keys.
    rows = np.zeros([relative_vocab_size, num_heads], np.float32)
    for rel_id, value in (initial_biases or {}).items():
      if not 0 <= rel_id < relative_vocab_size:
        raise ValueError(f"initial bias for relative id {rel_id}, outside "
                         f"the vocabulary of {relative_vocab_size}")
      if np.ndim(value) not in (0, 1) or np.size(value) not in (1, num_heads):
        raise ValueError(f"initial bias for relative id {rel_id}: one value "
                         f"or one per head ({num_heads}), got {value!r}")
      rows[rel_id, :] = value
    self._initial_bias_rows = rows

  def _bias_initializer(self, shape, dtype=None, **unused_kwargs):
    return tf.constant(np.reshape(self._initial_bias_rows, shape),
                       dtype or tf.float32)

  def build(self, input_shape=None):
    self.emb_table = self.add_weight(
        "relative_emb_table",
        [self.relative_vocab_size, self.num_heads, self.size_per_head],
        initializer=tf_keras.initializers.TruncatedNormal(stddev=0.5))
    self.bias_table = self.add_weight(
        "relative_bias_table", [self.relative_vocab_size, self.num_heads],
        initializer=self._bias_initializer)
    super().build(input_shape)

  def scores_per_id(self, queries: tf.Tensor, bias_scale: float = 1.0
                    ) -> tf.Tensor:
    """q.rel_emb[id] + bias_scale * rel_bias[id] for every id.

    Args:
      queries: <T>[B, H, N, D].
      bias_scale: multiplies the bias (callers that pre-scale the queries by
        1/sqrt(d) pass the same factor here).

    Returns:
      <float32>[B, N, R, H]: the layout `tf.gather(..., batch_dims=2)` wants.
    """
    # A batched product over heads and one transpose of its (small) result:
    # the einsum "bhnd,rhd->bnrh" did the same work at half the speed
    # forward and backward on the oneDNN CPU kernels (17.9 against 8.9 ms
    # at L = 4096, hidden 768).
    table = tf.transpose(tf.cast(self.emb_table, queries.dtype), [1, 2, 0])
    scores = tf.transpose(tf.matmul(queries, table), [0, 2, 3, 1])
    return tf.cast(scores, tf.float32) + bias_scale * tf.cast(
        self.bias_table, tf.float32)

  def official_variables(self) -> Dict[str, tf.Variable]:
    return {"relative_emb_table": self.emb_table,
            "relative_bias_table": self.bias_table}


# Under XLA, rows of at least this many keys get the masked-sum gradient
# (`_relative_scores_masked_sum`). On an H100 (12 layers, bf16,
# docs/benchmarks.md, "The relative scores' gradient") the gather's
# scatter-add took 12.2 ms per layer for g2l rows of 16384 keys, where the
# masked sum costs about 2.2 ms (its measured total shared out by score
# elements); at 4096 keys and below (l2l, l2g, g2g, and g2l at 4096
# tokens) the scatter was the faster of the two.
MASKED_SUM_MIN_KEYS = 8192


def relative_scores(per_id: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
  """Picks the relative score of each (query, key) pair.

  Args:
    per_id: <float32>[B, N, R, H] from `RelativeTable.scores_per_id`.
    ids: <int32>[B, N, K] relative ids.

  Returns:
    <float32>[B, H, N, K].
  """
  keys = ids.shape[-1]
  if in_xla_context() and keys is not None and keys >= MASKED_SUM_MIN_KEYS:
    return _relative_scores_masked_sum(per_id, ids)
  return _picked(per_id, ids)


def _picked(per_id: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
  """The gather itself: [B, N, R, H] by [B, N, K] ids -> [B, H, N, K]."""
  picked = tf.gather(per_id, ids, axis=2, batch_dims=2)
  return tf.transpose(picked, [0, 3, 1, 2])


@tf.custom_gradient
def _relative_scores_masked_sum(per_id: tf.Tensor, ids: tf.Tensor):
  """`relative_scores` whose gradient is a masked sum per id, for XLA.

  The gather's own gradient is a scatter-add of every [B, H, N, K] score
  gradient into the few [B, N, R, H] cells of its ids. On a GPU the adds
  collide: a g2l row has one or two distinct ids over its L keys, and at
  16384 long and 1024 global tokens that scatter took 146 of the 415 ms of
  a 12-layer step on an H100. Here the gradient of id r is the sum over the
  keys of the score gradient where the id is r: a row reduction over the
  last axis of a broadcast [B, H, N, R, K] comparison, which XLA fuses
  into passes over the gradient without materialising it, at a cost that
  grows with R instead of with the collisions (outside XLA that tensor
  would be R times the scores, so TensorFlow's kernels keep the gather's
  gradient).
  """
  def grad(d_picked):
    num_ids = per_id.shape[2]
    match = tf.equal(ids[:, None, :, None, :],
                     tf.range(num_ids, dtype=ids.dtype)[:, None])
    per_id_grad = tf.reduce_sum(
        tf.where(match, tf.cast(d_picked, per_id.dtype)[:, :, :, None, :],
                 tf.zeros([], per_id.dtype)), axis=-1)  # [B, H, N, R]
    return tf.transpose(per_id_grad, [0, 2, 3, 1]), None

  return _picked(per_id, ids), grad
