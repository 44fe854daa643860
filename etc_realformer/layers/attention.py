"""Fused global-local attention with relative positions and RealFormer streams.

One layer of ETC attention has four pieces (see the ETC paper, Sec. 2):

  piece  queries  keys    extent
  l2l    long     long    a band of radius r (local)
  l2g    long     global  all
  g2g    global   global  all
  g2l    global   long    all

l2l and l2g share ONE softmax per long query, g2g and g2l ONE per global
query ("fused"). Scores are

  S = (q.k + q.rel_emb[id] + rel_bias[id, head]) / sqrt(d)

with one relative table for the long queries and one for the global ones.
Masks add -10000 * (1 - mask) before the softmax, as the original does.

RealFormer (residual attention) carries, per pattern p, the running sum of S
across layers: S'_p = S_p + S'_p(prev), logits_p = S'_p [/ n] + mask_adder.
Each pattern's stream keeps the layout its scores are computed in (l2l in the
blocked band layout on the sparse path, never [L, L]), so residual attention
adds no asymptotic cost.

A row whose keys are all masked gets all-zero probabilities (the attention
output of that query is zero). The original would spread it uniformly over
whatever keys its layout happens to hold, which differs between the blocked
and the dense layouts; zero is layout-independent and finite in every dtype.
"""

import math
from typing import (Callable, Dict, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple)

from absl import logging
import numpy as np
import tensorflow as tf
# TF's own test for "being traced for XLA" (its control flow and Keras use
# it); there is no public one.
from tensorflow.python.ops import control_flow_util  # pylint: disable=g-direct-tensorflow-import
import tf_keras

from etc_realformer.config import PATTERNS
from etc_realformer.kernels import build as kernel_build
from etc_realformer.kernels import side_softmax as kernel
from etc_realformer.layers import blocking
from etc_realformer.layers.dropout import fold_seed
from etc_realformer.layers.dropout import keep_gain
from etc_realformer.layers.dropout import keep_threshold
from etc_realformer.layers.dropout import mask_halves
from etc_realformer.layers.dropout import stateless_dropout

# Added to the logits of masked keys, as in the original ETC (not -inf: a fully
# masked row must stay finite; -10000 is representable in float16).
MASK_ADDER = -10000.0

Dim = blocking.Dim

# With `stream_sources`, the streams dict holds one entry under this key: the
# earlier layers' score inputs (`_SOURCE_KEYS` of each layer's tensors).
SOURCES = "sources"
_SOURCE_KEYS = ("long_q", "global_q", "l2l_k", "l2g_k", "g2g_k", "g2l_k",
                "long_per_id", "global_per_id")


def fresh_initializer(initializer):
  """A new instance of `initializer`.

  tf_keras returns identical values from one unseeded initializer instance
  called several times, so each weight gets its own instance.
  """
  if isinstance(initializer, str):
    return tf_keras.initializers.get(initializer)
  if not isinstance(initializer, tf_keras.initializers.Initializer):
    return initializer  # A plain callable (e.g. `SharedOrthogonal`'s).
  return initializer.__class__.from_config(initializer.get_config())


class SharedOrthogonal:
  """One random orthogonal matrix Q handed to several kernels.

  `initializer(gain)` gives gain * Q, `transposed_initializer(gain)` gives
  gain * Q^T: a value kernel Q followed by an output kernel gain * Q^T starts
  as gain times the identity (`EtcConfig.value_output_identity_init`); query
  and key kernels both s * Q start with scores s^2 x.x'
  (`EtcConfig.query_key_identity_init`). Q is drawn on first use (variables
  are initialised eagerly, also when first built inside a `tf.function`).
  """

  def __init__(self):
    self._q = None

  def _matrix(self, shape) -> tf.Tensor:
    if len(shape) != 2 or shape[0] != shape[1]:
      raise ValueError(f"identity init needs square kernels, got "
                       f"{list(shape)}")
    if self._q is None:
      self._q = tf_keras.initializers.Orthogonal()(list(shape), tf.float32)
    return self._q

  def initializer(self, gain: float = 1.0):
    def init(shape, dtype=None, **unused_kwargs):
      return tf.cast(gain * self._matrix(shape), dtype or tf.float32)
    return init

  def transposed_initializer(self, gain: float = 1.0):
    def init(shape, dtype=None, **unused_kwargs):
      return tf.cast(gain * tf.transpose(self._matrix(shape)),
                     dtype or tf.float32)
    return init


class Linear(tf_keras.layers.Layer):
  """y = x W + b over the last axis (a Dense with explicit, named weights).

  Written by hand rather than using `Dense` so that the weight shapes exist
  right after `build` and map one-to-one onto the released checkpoints'
  `kernel`/`bias` names.
  """

  def __init__(self, units: int, initializer, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.initializer = initializer

  def build(self, input_shape):
    in_dim = int(input_shape[-1])
    self.kernel = self.add_weight("kernel", [in_dim, self.units],
                                  initializer=fresh_initializer(
                                      self.initializer))
    self.bias = self.add_weight("bias", [self.units], initializer="zeros")
    super().build(input_shape)

  def matmul(self, x: tf.Tensor) -> tf.Tensor:
    """<T>[..., in_dim] -> <T>[..., units], x W without the bias (for a fused
    kernel that adds it)."""
    return self._product(x, bias=False)

  def call(self, x: tf.Tensor) -> tf.Tensor:
    """<T>[..., in_dim] -> <T>[..., units]."""
    return self._product(x, bias=True)

  def _product(self, x: tf.Tensor, bias: bool) -> tf.Tensor:
    x = tf.cast(x, self.compute_dtype)
    if x.shape.rank == 2:
      y = tf.matmul(x, self.kernel)
      return y + self.bias if bias else y
    # A 2-D matmul, not einsum("...i,io->...o"): the einsum gradient with
    # respect to the kernel materializes an [in, out, ..., N] tensor on the
    # oneDNN CPU kernels (9.7 GB at L=4096, hidden 768).
    lead = tf.shape(x)[:-1]
    y = tf.matmul(tf.reshape(x, [-1, x.shape[-1]]), self.kernel)
    if bias:
      y += self.bias
    return tf.reshape(y, tf.concat([lead, [self.units]], 0))

  def official_variables(self) -> Dict[str, tf.Variable]:
    return {"kernel": self.kernel, "bias": self.bias}


class HeadProjection(Linear):
  """Projects to attention heads: <T>[B, N, hidden] -> <T>[B, H, N, D].

  Heads come out in front of the sequence axis, the layout the score and
  value matrix products want.
  """

  def __init__(self, num_heads: int, size_per_head: int, initializer,
               **kwargs):
    super().__init__(num_heads * size_per_head, initializer, **kwargs)
    self.num_heads = num_heads
    self.size_per_head = size_per_head

  def call(self, x: tf.Tensor) -> tf.Tensor:
    y = super().call(x)
    shape = tf.shape(y)
    y = tf.reshape(y, [shape[0], shape[1], self.num_heads,
                       self.size_per_head])
    return tf.transpose(y, [0, 2, 1, 3])

  def official_variables(self) -> Dict[str, tf.Variable]:
    # The original wraps the Dense in a `linear` scope.
    return {"linear/kernel": self.kernel, "linear/bias": self.bias}


class RelativeTable(tf_keras.layers.Layer):
  """Relative position embeddings and biases for one query side.

  Weights: `relative_emb_table` <float>[R, H, D] and `relative_bias_table`
  <float>[R, H].
  """

  def __init__(self, relative_vocab_size: int, num_heads: int,
               size_per_head: int,
               initial_biases: Optional[Mapping[int, float]] = None,
               **kwargs):
    """`initial_biases`: {relative id: initial bias (all heads)}; others 0."""
    super().__init__(**kwargs)
    self.relative_vocab_size = relative_vocab_size
    self.num_heads = num_heads
    self.size_per_head = size_per_head
    self.initial_biases = dict(initial_biases or {})
    for rel_id in self.initial_biases:
      if not 0 <= rel_id < relative_vocab_size:
        raise ValueError(f"initial bias for relative id {rel_id}, outside "
                         f"the vocabulary of {relative_vocab_size}")

  def _bias_initializer(self, shape, dtype=None, **unused_kwargs):
    rows = np.zeros(shape, np.float32)
    for rel_id, value in self.initial_biases.items():
      rows[rel_id, :] = value
    return tf.constant(rows, dtype or tf.float32)

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


def relative_scores(per_id: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
  """Picks the relative score of each (query, key) pair.

  Args:
    per_id: <float32>[B, N, R, H] from `RelativeTable.scores_per_id`.
    ids: <int32>[B, N, K] relative ids.

  Returns:
    <float32>[B, H, N, K].
  """
  picked = tf.gather(per_id, ids, axis=2, batch_dims=2)
  return tf.transpose(picked, [0, 3, 1, 2])


class PreparedSideInputs(NamedTuple):
  """Side inputs turned into the layouts one attention layer consumes.

  Made once per forward pass by `prepare_side_inputs` and shared by all
  layers. `sparse` tells the layout of the long-query pieces:

  * sparse: l2l_* are <float32>[B, 1, nb, b, 3b] (adders), l2g_adder is
    [B, 1, nb, b, G]; l2l_ids stay in the window layout [B, L, 2r+1].
  * full: l2l_adder is [B, 1, L, L], l2g_adder [B, 1, L, G], l2l_ids [B, L, L].

  `long_valid` / `global_valid` are 1.0 for queries with at least one
  unmasked key, shaped to broadcast against the probabilities.
  """
  sparse: bool
  long_len: tf.Tensor
  l2l_adder: tf.Tensor
  l2g_adder: tf.Tensor
  g2g_adder: tf.Tensor
  g2l_adder: tf.Tensor
  long_valid: tf.Tensor
  global_valid: tf.Tensor
  l2l_ids: Optional[tf.Tensor]
  l2g_ids: Optional[tf.Tensor]
  g2g_ids: Optional[tf.Tensor]
  g2l_ids: Optional[tf.Tensor]


def _adder(mask: tf.Tensor) -> tf.Tensor:
  return MASK_ADDER * (1.0 - tf.cast(mask, tf.float32))


def prepare_side_inputs(side: Mapping[str, Optional[tf.Tensor]],
                        batch_size, long_len: int, global_len: int,
                        local_radius: int, sparse: bool
                        ) -> PreparedSideInputs:
  """Converts the eight side inputs for `FusedGlobalLocalAttention`.

  Args:
    side: `l2l_att_mask` <int32>[B, L, 2r+1], `g2g_att_mask` [B, G, G],
      `l2g_att_mask` [B, L, G], `g2l_att_mask` [B, G, L] and the four
      `*_relative_att_ids` of the same shapes. A missing or None mask allows
      everything (l2l: everything inside the band); missing ids mean no
      relative term for that piece.
    batch_size: B (int or scalar tensor).
    long_len: L (static int).
    global_len: G (static int).
    local_radius: r.
    sparse: blocked (True) or dense (False) layout for l2l.

  Returns:
    A `PreparedSideInputs`.
  """
  r = local_radius
  window = 2 * r + 1

  def get(name):
    value = side.get(name)
    if value is None:
      return None
    return tf.convert_to_tensor(value)

  l2l_mask = get("l2l_att_mask")
  if l2l_mask is None:
    l2l_mask = tf.ones([batch_size, long_len, window], tf.int32)
  # Keys outside the sequence never count, whatever the caller's mask says.
  in_range = blocking.window_in_range_mask(long_len, r)
  l2l_mask = tf.cast(l2l_mask, tf.float32) * tf.cast(in_range, tf.float32)

  def full_mask(name, rows, cols):
    value = get(name)
    if value is None:
      return tf.ones([batch_size, rows, cols], tf.float32)
    return tf.cast(value, tf.float32)

  l2g_mask = full_mask("l2g_att_mask", long_len, global_len)
  g2g_mask = full_mask("g2g_att_mask", global_len, global_len)
  g2l_mask = full_mask("g2l_att_mask", global_len, long_len)

  long_valid = tf.cast(
      tf.logical_or(tf.reduce_any(l2l_mask > 0, -1),
                    tf.reduce_any(l2g_mask > 0, -1)), tf.float32)  # [B, L]
  global_valid = tf.cast(
      tf.logical_or(tf.reduce_any(g2g_mask > 0, -1),
                    tf.reduce_any(g2l_mask > 0, -1)), tf.float32)  # [B, G]

  l2l_ids = get("l2l_relative_att_ids")
  if sparse:
    block_len = r + 1
    l2l_adder = _adder(blocking.window_to_blocked(l2l_mask, r))
    l2g_adder = _adder(blocking.split_into_blocks(l2g_mask, block_len, 1))
    long_valid = blocking.split_into_blocks(long_valid, block_len, 1)
    long_valid = long_valid[:, tf.newaxis, :, :, tf.newaxis]
  else:
    l2l_adder = _adder(blocking.window_to_full(l2l_mask, r))
    l2g_adder = _adder(l2g_mask)
    long_valid = long_valid[:, tf.newaxis, :, tf.newaxis]
    if l2l_ids is not None:
      l2l_ids = blocking.window_to_full(l2l_ids, r)

  return PreparedSideInputs(
      sparse=sparse,
      long_len=long_len,
      l2l_adder=l2l_adder[:, tf.newaxis],
      l2g_adder=l2g_adder[:, tf.newaxis],
      g2g_adder=_adder(g2g_mask)[:, tf.newaxis],
      g2l_adder=_adder(g2l_mask)[:, tf.newaxis],
      long_valid=long_valid,
      global_valid=global_valid[:, tf.newaxis, :, tf.newaxis],
      l2l_ids=l2l_ids,
      l2g_ids=get("l2g_relative_att_ids"),
      g2g_ids=get("g2g_relative_att_ids"),
      g2l_ids=get("g2l_relative_att_ids"))


def fused_softmax(logits_a: tf.Tensor, logits_b: tf.Tensor,
                  valid: tf.Tensor, gain: float = 1.0
                  ) -> Tuple[tf.Tensor, tf.Tensor]:
  """One softmax over the keys of two score tensors, without concatenating.

  Args:
    logits_a: <float32>[..., Ka].
    logits_b: <float32>[..., Kb] (same leading shape).
    valid: <float32> broadcastable to [..., 1]; 0 zeroes a row.
    gain: multiplies the probabilities. Dropout's 1 / P(keep) goes here: it
      then costs a multiply per row, not a pass over every probability (and
      another over its gradient).

  Returns:
    (probs_a, probs_b), <float32>, summing to `gain` per valid row.
  """
  # The max only shifts the exponent (softmax is shift invariant): no gradient.
  peak = tf.stop_gradient(tf.maximum(
      tf.reduce_max(logits_a, -1, keepdims=True),
      tf.reduce_max(logits_b, -1, keepdims=True)))
  exp_a = tf.exp(logits_a - peak)
  exp_b = tf.exp(logits_b - peak)
  total = (tf.reduce_sum(exp_a, -1, keepdims=True) +
           tf.reduce_sum(exp_b, -1, keepdims=True))
  scale = valid / total
  if gain != 1.0:
    scale = scale * gain
  return exp_a * scale, exp_b * scale


def _row_keep_mask(seed: tf.Tensor, site: int, rate: float, row_start: Dim,
                   num_rows: Dim, row_shape: tf.Tensor) -> tf.Tensor:
  """Rows [row_start, row_start + num_rows) of one seeded keep mask.

  The whole mask is a single Philox stream laid out rows first,
  [num_rows_total, *row_shape]; a piece of it is drawn alone by starting the
  counter at the piece's offset, so a chunked computation sees exactly the
  bits of the unchunked one (`tf.random.stateless_uniform` has no offset).

  Args:
    seed: <int32>[2] per-call seed.
    site: the dropout site (folded into the seed).
    rate: drop probability.
    row_start, num_rows: the rows wanted.
    row_shape: <int32>[k], the shape of one row.

  Returns:
    <bool>[num_rows, *row_shape], True with probability 1 - rate (to 1/65536).
  """
  per_row = tf.reduce_prod(tf.cast(row_shape, tf.int64))
  halves = mask_halves(fold_seed(seed, site),
                       tf.cast(row_start, tf.int64) * per_row,
                       tf.cast(num_rows, tf.int64) * per_row)
  keep = halves >= tf.constant(keep_threshold(rate), tf.uint16)
  return tf.reshape(keep, tf.concat(
      [tf.reshape(tf.cast(num_rows, tf.int32), [1]),
       tf.cast(row_shape, tf.int32)], 0))


def row_dropout(probs: tf.Tensor, rate: float, seed: Optional[tf.Tensor],
                site: int, training: bool, row_start: Dim = 0,
                row_axis: int = 2, prescaled: bool = False) -> tf.Tensor:
  """Attention-probability dropout whose mask is cut along `row_axis`.

  The mask of the rows [row_start, row_start + n) of a probability tensor is
  the same whether the tensor is computed whole or in chunks of rows (query
  blocks on the long side, global queries on the global side). Same keep
  probability and scaling as `stateless_dropout`.

  Args:
    probs: <float32>[..., n, ...] with the n rows at `row_axis`.
    rate, seed, site, training: as `stateless_dropout`.
    row_start: the index of this tensor's first row in the whole tensor.
    row_axis: the row axis (non-negative).
    prescaled: `probs` already carries `keep_gain(rate)` (see
      `fused_softmax`'s `gain`): only the mask is applied.

  Returns:
    <float32> like `probs`.
  """
  if not training or rate == 0.0:
    return probs
  if seed is None:
    raise ValueError("row_dropout needs a seed when training")
  shape = tf.shape(probs)
  rank = probs.shape.rank
  rest = [i for i in range(rank) if i != row_axis]
  row_shape = tf.gather(shape, rest)
  keep = _row_keep_mask(seed, site, rate, row_start, shape[row_axis],
                        row_shape)
  # [n, *rest] -> the layout of `probs`.
  perm = list(range(1, row_axis + 1)) + [0] + list(range(row_axis + 1, rank))
  keep = tf.transpose(keep, perm)
  if not prescaled:
    probs = probs * tf.cast(keep_gain(rate), probs.dtype)
  return tf.where(keep, probs, tf.zeros_like(probs))


class FusedGlobalLocalAttention(tf_keras.layers.Layer):
  """ETC attention for one layer, with optional RealFormer score streams.

  Weight names follow the released checkpoints (`long_query_projection`,
  `l2l_key_projection`, ..., `long_output_projection`, the two relative
  tables); projections that a sharing option makes identical exist once.
  """

  def __init__(self,
               hidden_size: int,
               num_heads: int,
               size_per_head: int,
               local_radius: int,
               relative_vocab_size: Optional[int],
               att_dropout_prob: float,
               initializer,
               share_kv_projections: bool = False,
               share_qkv_projections: bool = True,
               share_att_output_projection: bool = False,
               dropout_site: int = 0,
               global_relative_initial_biases: Optional[Mapping[int, float]]
               = None,
               value_output_identity_init: float = 0.0,
               query_key_identity_init: float = 0.0,
               **kwargs):
    """See `EtcConfig`; the last three are its from-scratch init options.

    `global_relative_initial_biases`: {relative id: initial bias} of the
    global queries' relative table. `value_output_identity_init`: when > 0,
    value kernels start as one orthogonal Q and output kernels as this
    factor times Q^T. `query_key_identity_init`: when > 0, query and key
    kernels start as sqrt(factor) times one orthogonal Q.
    """
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.num_heads = num_heads
    self.size_per_head = size_per_head
    self.local_radius = local_radius
    self.relative_vocab_size = relative_vocab_size
    self.att_dropout_prob = att_dropout_prob
    self.share_kv_projections = share_kv_projections
    self.share_qkv_projections = share_qkv_projections
    self.share_att_output_projection = share_att_output_projection
    self.dropout_site = dropout_site

    value_init = output_init = query_key_init = initializer
    if value_output_identity_init:
      shared = SharedOrthogonal()
      value_init = shared.initializer()
      output_init = shared.transposed_initializer(value_output_identity_init)
    if query_key_identity_init:
      query_key_init = SharedOrthogonal().initializer(
          math.sqrt(query_key_identity_init))

    def proj(name):
      if name.endswith("value_projection"):
        init = value_init
      else:
        init = query_key_init
      return HeadProjection(num_heads, size_per_head, init, name=name)

    self.long_query_projection = proj("long_query_projection")
    self.l2l_key_projection = proj("l2l_key_projection")
    self.l2l_value_projection = proj("l2l_value_projection")
    share_long_kv = share_qkv_projections or share_kv_projections
    self.l2g_key_projection = (self.l2l_key_projection if share_long_kv
                               else proj("l2g_key_projection"))
    self.l2g_value_projection = (self.l2l_value_projection if share_long_kv
                                 else proj("l2g_value_projection"))
    if share_qkv_projections:
      self.global_query_projection = self.long_query_projection
      self.g2g_key_projection = self.l2l_key_projection
      self.g2g_value_projection = self.l2l_value_projection
      self.g2l_key_projection = self.l2l_key_projection
      self.g2l_value_projection = self.l2l_value_projection
    else:
      self.global_query_projection = proj("global_query_projection")
      self.g2g_key_projection = proj("g2g_key_projection")
      self.g2g_value_projection = proj("g2g_value_projection")
      self.g2l_key_projection = (self.g2g_key_projection
                                 if share_kv_projections
                                 else proj("g2l_key_projection"))
      self.g2l_value_projection = (self.g2g_value_projection
                                   if share_kv_projections
                                   else proj("g2l_value_projection"))

    if relative_vocab_size is not None:
      self.long_relative = RelativeTable(relative_vocab_size, num_heads,
                                         size_per_head, name="long_relative")
      self.global_relative = RelativeTable(
          relative_vocab_size, num_heads, size_per_head,
          initial_biases=global_relative_initial_biases,
          name="global_relative")
    else:
      self.long_relative = self.global_relative = None

    self.long_output_projection = Linear(hidden_size, output_init,
                                         name="long_output_projection")
    self.global_output_projection = (
        self.long_output_projection if share_att_output_projection
        else Linear(hidden_size, output_init,
                    name="global_output_projection"))

  # ---------------------------------------------------------------- weights
  def _unique_projections(self) -> Dict[str, HeadProjection]:
    names = ["long_query", "global_query", "l2l_key", "l2g_key", "g2g_key",
             "g2l_key", "l2l_value", "l2g_value", "g2g_value", "g2l_value"]
    seen, unique = set(), {}
    for name in names:
      layer = getattr(self, name + "_projection")
      if id(layer) not in seen:
        seen.add(id(layer))
        unique[name + "_projection"] = layer
    return unique

  def build(self, input_shape=None):
    hidden = tf.TensorShape([None, None, self.hidden_size])
    for layer in self._unique_projections().values():
      layer.build(hidden)
    heads = tf.TensorShape([None, None, self.num_heads * self.size_per_head])
    self.long_output_projection.build(heads)
    self.global_output_projection.build(heads)
    if self.long_relative is not None:
      self.long_relative.build()
      self.global_relative.build()
    super().build(input_shape)

  def official_variables(self) -> Dict[str, tf.Variable]:
    """Variables by their name under `.../fused_global_local_att/`."""
    out = {}
    for name, layer in self._unique_projections().items():
      for suffix, var in layer.official_variables().items():
        out[f"{name}/{suffix}"] = var
    outputs = {"long_output_projection": self.long_output_projection}
    if not self.share_att_output_projection:
      outputs["global_output_projection"] = self.global_output_projection
    for name, layer in outputs.items():
      for suffix, var in layer.official_variables().items():
        out[f"{name}/{suffix}"] = var
    if self.long_relative is not None:
      for suffix, var in self.long_relative.official_variables().items():
        out[f"long_qkv_attention/qkv_relative_attention/{suffix}"] = var
      for suffix, var in self.global_relative.official_variables().items():
        out[f"global_qkv_attention/{suffix}"] = var
    return out

  # ------------------------------------------------------------------- call
  def call(self,
           long_input: tf.Tensor,
           global_input: tf.Tensor,
           side: PreparedSideInputs,
           streams: Optional[Mapping[str, tf.Tensor]] = None,
           carried: Tuple[str, ...] = (),
           num_summed: int = 1,
           running_mean: bool = False,
           training: bool = False,
           seed: Optional[tf.Tensor] = None,
           return_probs: bool = False,
           recompute: bool = False,
           chunk_len: int = 0,
           emit_streams: bool = True,
           stream_sources: bool = False,
           fused_kernel: str = "auto"):
    """Runs one layer of fused global-local attention.

    Args:
      long_input: <T>[B, L, hidden].
      global_input: <T>[B, G, hidden].
      side: `PreparedSideInputs` (also fixes sparse vs full).
      streams: the previous layers' running score sums for the carried
        patterns (absent in the first layer), in this path's layouts.
      carried: the patterns whose scores are carried (RealFormer).
      num_summed: how many layers the new running sums cover (this layer's
        index + 1); used by `running_mean`.
      running_mean: softmax the running mean instead of the running sum.
      training: apply attention-probability dropout.
      seed: <int32>[2] per-call dropout seed.
      return_probs: also return the attention probabilities.
      recompute: keep only the core's inputs for the backward pass and
        recompute scores, softmaxes and dropout there (saves the [.., L, 3b]
        and [.., L, G] score tensors, at the cost of one more core pass).
      chunk_len: on the sparse path with static lengths, cut the queries into
        ceil(L / chunk_len) chunks (long: whole blocks; global: rows), each
        computed alone and recomputed alone in the backward pass (see
        `_attend_chunked`); 0, or a single chunk, keeps the whole core.
        Ignored with `return_probs` and under XLA (see below).
      emit_streams: return the new running sums (False for the last layer,
        whose streams nobody reads: they are then never built whole).
      stream_sources: carry the streams as their sources instead of as sums
        (`EtcConfig.recompute_residual_streams`): `streams` is then
        `{"sources": [one dict per earlier layer]}` (pre-scaled queries, keys
        and relative scores per id), this layer appends its own, and the sums
        are recomputed where they are read: chunk by chunk on the sparse
        path with static lengths, whole otherwise.
      fused_kernel: `EtcConfig.fused_attention_kernel`: on the sparse path
        (probabilities not returned) each query side's elementwise work runs
        in the fused CPU kernel where `kernel_build.use_fused_kernel` allows
        it; the same function either way.

    Returns:
      (long_output <T>[B, L, hidden], global_output <T>[B, G, hidden],
       new_streams: dict pattern -> running sum (carried patterns only),
       probs: None, or dict pattern -> <float32> probabilities in canonical
       layouts: l2l [B, H, L, 2r+1], l2g [B, H, L, G], g2g [B, H, G, G],
       g2l [B, H, G, L]).
    """
    streams = streams or {}
    scale = 1.0 / math.sqrt(self.size_per_head)

    # Projections, each computed once even when shared between pieces.
    cache = {}

    def project(layer, x, which):
      key = (id(layer), which)
      if key not in cache:
        cache[key] = layer(x)
      return cache[key]

    long_q = project(self.long_query_projection, long_input, "long")
    global_q = project(self.global_query_projection, global_input, "global")
    l2l_k = project(self.l2l_key_projection, long_input, "long")
    l2l_v = project(self.l2l_value_projection, long_input, "long")
    l2g_k = project(self.l2g_key_projection, global_input, "global")
    l2g_v = project(self.l2g_value_projection, global_input, "global")
    g2g_k = project(self.g2g_key_projection, global_input, "global")
    g2g_v = project(self.g2g_value_projection, global_input, "global")
    g2l_k = project(self.g2l_key_projection, long_input, "long")
    g2l_v = project(self.g2l_value_projection, long_input, "long")

    def f32(x):
      return tf.cast(x, tf.float32)

    # Scaling the queries (an [N, D] tensor) instead of the scores (an
    # [N, keys] tensor) saves a full pass over every score tensor; the bias
    # takes the same factor, so every score is (q.k + q.e + b) / sqrt(d).
    long_q = long_q * tf.cast(scale, long_q.dtype)
    global_q = global_q * tf.cast(scale, global_q.dtype)

    # Relative scores per id use the tables (variables), so they are made
    # here, outside the (possibly recomputed) core.
    tensors = dict(long_q=long_q, global_q=global_q, l2l_k=l2l_k, l2l_v=l2l_v,
                   l2g_k=l2g_k, l2g_v=l2g_v, g2g_k=g2g_k, g2g_v=g2g_v,
                   g2l_k=g2l_k, g2l_v=g2l_v)
    if self.long_relative is not None:
      tensors["long_per_id"] = self.long_relative.scores_per_id(long_q, scale)
      tensors["global_per_id"] = self.global_relative.scores_per_id(
          global_q, scale)

    fused = (side.sparse and not return_probs and
             kernel_build.use_fused_kernel(fused_kernel))

    def attend(t, prev_streams, want_probs):
      if fused:
        return self._attend_fused(t, prev_streams, side, carried, num_summed,
                                  running_mean, training, seed,
                                  emit_streams and not stream_sources)
      return self._attend(t, prev_streams, side, carried, num_summed,
                          running_mean, training, seed, want_probs)

    prev_sources = ()
    if stream_sources and carried:
      prev_sources = tuple(streams.get(SOURCES, ()))
      own_source = {k: v for k, v in tensors.items() if k in _SOURCE_KEYS}
    sources = prev_sources
    chunkable = (side.sparse and not return_probs and
                 isinstance(side.long_len, int) and
                 global_q.shape[2] is not None)
    num_chunks = 0
    if chunkable and chunk_len and _in_xla_context():
      # XLA schedules the chunks by its own lights (the control edges that
      # sequence them do not bound its memory, nor did an optimization
      # barrier): float32 fwd+bwd at L = 8192 peaked at 7.8 GiB chunked
      # against 6.1 unchunked, at the same speed (docs/benchmarks.md,
      # "Session 11"). So chunk only outside XLA.
      logging.log_first_n(
          logging.INFO, "attention_chunk_len %s ignored under XLA "
          "(jit_compile): the chunk order that bounds memory does not hold "
          "there.", 1, chunk_len)
    elif chunkable and chunk_len:
      num_chunks = -(-side.long_len // chunk_len)
    if chunkable and sources:
      # Recomputed streams are only worth it chunk by chunk.
      num_chunks = max(num_chunks, 1)
    elif sources:
      # No chunked path here (full layout, probabilities, dynamic lengths):
      # the sums are built whole from the sources.
      streams = self._summed_streams(sources, side, carried)
      sources = ()
    if num_chunks > 1 or (num_chunks and sources):
      long_ctx, global_ctx, new_streams = self._attend_chunked(
          tensors, streams, side, carried, num_summed, running_mean,
          training, seed, emit_streams and not stream_sources, num_chunks,
          sources, fused)
      returned_probs = None
    elif recompute and not return_probs:
      long_ctx, global_ctx, new_streams = _recomputed(
          attend, tensors, dict(streams),
          carried if emit_streams and not stream_sources else ())
      returned_probs = None
    else:
      long_ctx, global_ctx, new_streams, returned_probs = attend(
          tensors, streams, return_probs)
    if not emit_streams:
      new_streams = {}
    elif stream_sources and carried:
      new_streams = {SOURCES: list(prev_sources) + [own_source]}

    long_output = self.long_output_projection(_merge_heads(long_ctx))
    global_output = self.global_output_projection(_merge_heads(global_ctx))
    return long_output, global_output, new_streams, returned_probs

  def _raw_scores(self, t: Mapping[str, tf.Tensor], side: PreparedSideInputs,
                  patterns: Tuple[str, ...] = PATTERNS
                  ) -> Dict[str, tf.Tensor]:
    """One layer's scaled raw scores per pattern (before streams and masks).

    Args:
      t: `long_q`, `global_q` (pre-scaled), the keys and optionally
        `long_per_id` / `global_per_id` (see `_attend`).
      side: fixes the layout: sparse l2l/l2g are blocked ([B, H, nb, b, 3b],
        [B, H, nb, b, G]), full ones [B, H, L, L], [B, H, L, G]; g2g
        [B, H, G, G] and g2l [B, H, G, L] either way.
      patterns: the patterns wanted.

    Returns:
      dict pattern -> <float32> scores.
    """
    r = self.local_radius
    long_per_id, global_per_id = t.get("long_per_id"), t.get("global_per_id")
    out = {}

    def f32(x):
      return tf.cast(x, tf.float32)

    if "l2l" in patterns:
      if side.sparse:
        q_blocks = blocking.split_into_blocks(t["long_q"], r + 1, axis=2)
        k_blocks = blocking.band_blocks(t["l2l_k"], r + 1, axis=2)
        # [B, H, nb, b, 3b]
        out["l2l"] = f32(tf.matmul(q_blocks, k_blocks, transpose_b=True))
        if long_per_id is not None and side.l2l_ids is not None:
          out["l2l"] += blocking.window_to_blocked(
              relative_scores(long_per_id, side.l2l_ids), r)
      else:
        # [B, H, L, L]
        out["l2l"] = f32(tf.matmul(t["long_q"], t["l2l_k"], transpose_b=True))
        if long_per_id is not None and side.l2l_ids is not None:
          out["l2l"] += relative_scores(long_per_id, side.l2l_ids)
    if "l2g" in patterns:
      # [B, H, L, G], blocked to [B, H, nb, b, G] on the sparse path.
      l2g = f32(tf.matmul(t["long_q"], t["l2g_k"], transpose_b=True))
      if long_per_id is not None and side.l2g_ids is not None:
        l2g += relative_scores(long_per_id, side.l2g_ids)
      out["l2g"] = (blocking.split_into_blocks(l2g, r + 1, axis=2)
                    if side.sparse else l2g)
    for pattern, ids in (("g2g", side.g2g_ids), ("g2l", side.g2l_ids)):
      if pattern in patterns:
        score = f32(tf.matmul(t["global_q"], t[pattern + "_k"],
                              transpose_b=True))
        if global_per_id is not None and ids is not None:
          score += relative_scores(global_per_id, ids)
        out[pattern] = score
    return out

  def _summed_streams(self, sources: Tuple[Mapping[str, tf.Tensor], ...],
                      side: PreparedSideInputs, carried: Tuple[str, ...]
                      ) -> Dict[str, tf.Tensor]:
    """The running sums of `carried` over the layers of `sources`, built
    whole, in the order the materialized streams are added."""
    return _sum_in_stream_order(
        [lambda src=src: self._raw_scores(src, side, carried)
         for src in sources], carried)

  def _attend(self, t: Dict[str, tf.Tensor], streams: Mapping[str, tf.Tensor],
              side: PreparedSideInputs, carried: Tuple[str, ...],
              num_summed: int, running_mean: bool, training: bool,
              seed: Optional[tf.Tensor], return_probs: bool):
    """Scores -> streams -> fused softmaxes -> dropout -> weighted values.

    A pure function of its tensors (no variables, seeded dropout), so it can
    be recomputed in the backward pass.

    Args:
      t: queries [B, H, N, D] (pre-scaled), keys and values per piece, and
        optionally `long_per_id` / `global_per_id` [B, N, R, H].
      streams: previous running sums of the carried patterns.
      (others as in `call`.)

    Returns:
      (long_ctx <T>[B, H, L, D], global_ctx <T>[B, H, G, D], new_streams,
       probs or None).
    """
    r = self.local_radius
    long_len = side.long_len
    long_q = t["long_q"]
    scores = self._raw_scores(t, side)
    if side.sparse:
      v_blocks = blocking.band_blocks(t["l2l_v"], r + 1, axis=2)

    # ---- RealFormer: running sums per carried pattern.
    new_streams = {}
    logits = {}
    for pattern in PATTERNS:
      s = scores[pattern]
      if pattern in carried:
        if pattern in streams:
          s = s + streams[pattern]
        new_streams[pattern] = s
        if running_mean and num_summed > 1:
          s = s / float(num_summed)
      logits[pattern] = s

    # Dropout's gain rides on the softmax's per-row scale, except when the
    # (undropped) probabilities are returned.
    gain = 1.0 if return_probs else keep_gain(self.att_dropout_prob, training)
    long_probs = fused_softmax(logits["l2l"] + side.l2l_adder,
                               logits["l2g"] + side.l2g_adder,
                               side.long_valid, gain)
    global_probs = fused_softmax(logits["g2g"] + side.g2g_adder,
                                 logits["g2l"] + side.g2l_adder,
                                 side.global_valid, gain)
    probs = dict(zip(("l2l", "l2g"), long_probs))
    probs.update(zip(("g2g", "g2l"), global_probs))

    returned_probs = None
    if return_probs:
      returned_probs = self._canonical_probs(probs, side)

    dtype = long_q.dtype
    dropped = {}
    for k, pattern in enumerate(PATTERNS):
      # The sparse path draws its masks by rows (query blocks, global
      # queries) so that the chunked path can draw the same ones piecewise.
      drop = row_dropout if side.sparse else stateless_dropout
      dropped[pattern] = tf.cast(
          drop(probs[pattern], self.att_dropout_prob, seed,
               self.dropout_site + k, training, prescaled=gain != 1.0),
          dtype)

    # ---- weighted values
    if side.sparse:
      long_ctx = tf.matmul(dropped["l2l"], v_blocks)  # [B, H, nb, b, D]
      shape = tf.shape(long_ctx)
      long_ctx = tf.reshape(long_ctx, [shape[0], shape[1],
                                       shape[2] * shape[3], shape[4]])
      l2g_p = dropped["l2g"]
      pshape = tf.shape(l2g_p)
      l2g_p = tf.reshape(l2g_p, [pshape[0], pshape[1], pshape[2] * pshape[3],
                                 pshape[4]])
      long_ctx += tf.matmul(l2g_p, t["l2g_v"])
      long_ctx = blocking.slice_last(long_ctx, 0, long_len, axis=2)
    else:
      long_ctx = (tf.matmul(dropped["l2l"], t["l2l_v"]) +
                  tf.matmul(dropped["l2g"], t["l2g_v"]))
    global_ctx = (tf.matmul(dropped["g2g"], t["g2g_v"]) +
                  tf.matmul(dropped["g2l"], t["g2l_v"]))
    return long_ctx, global_ctx, new_streams, returned_probs

  def _kernel_side(self, patterns: Tuple[str, str], raw_a: tf.Tensor,
                   raw_b: tf.Tensor, adders: Tuple[tf.Tensor, tf.Tensor],
                   valid: tf.Tensor, streams: Mapping[str, tf.Tensor],
                   per_id: Optional[tf.Tensor],
                   ids: Tuple[Optional[tf.Tensor], Optional[tf.Tensor]],
                   band: bool, carried: Tuple[str, ...], emit: bool,
                   num_summed: int, running_mean: bool, training: bool,
                   seed: Optional[tf.Tensor], first_site: int,
                   row_start: int = 0):
    """One query side through the fused kernel (4-D layouts, see
    `kernel.side_softmax`; `band`: the long side).

    Returns:
      (probabilities of the two patterns <T>, {pattern: new stream} of the
      carried patterns when `emit`).
    """
    a, b = patterns
    rate = self.att_dropout_prob
    dropout = training and rate > 0.0
    if dropout and seed is None:
      raise ValueError("attention dropout needs a seed when training")
    keys = (tf.stack([fold_seed(seed, first_site),
                      fold_seed(seed, first_site + 1)]) if dropout else None)
    out = kernel.side_softmax(
        raw_a, raw_b, adders[0], adders[1], valid, band=band,
        block_len=self.local_radius + 1 if band else 1, per_id=per_id,
        ids_a=ids[0], ids_b=ids[1],
        stream_a=streams.get(a) if a in carried else None,
        stream_b=streams.get(b) if b in carried else None,
        emit_a=emit and a in carried, emit_b=emit and b in carried,
        num_summed=num_summed if running_mean and num_summed > 1 else 1,
        keys=keys, threshold=keep_threshold(rate) if dropout else 0,
        gain=keep_gain(rate, training), row_start=row_start,
        save_probs=training)
    new = {}
    if out.new_a is not None:
      new[a] = out.new_a
    if out.new_b is not None:
      new[b] = out.new_b
    return out.probs_a, out.probs_b, new

  def _attend_fused(self, t: Dict[str, tf.Tensor],
                    streams: Mapping[str, tf.Tensor],
                    side: PreparedSideInputs, carried: Tuple[str, ...],
                    num_summed: int, running_mean: bool, training: bool,
                    seed: Optional[tf.Tensor], emit: bool):
    """`_attend` on the sparse path with each side's elementwise work in the
    fused kernel (no probabilities).

    Returns:
      (long_ctx <T>[B, H, L, D], global_ctx <T>[B, H, G, D], new_streams:
      the carried patterns' when `emit`, else {}; None).
    """
    b = self.local_radius + 1

    def blocks_of(x):
      return blocking.split_into_blocks(x, b, axis=2)

    q_blocks = blocks_of(t["long_q"])
    k_blocks = blocking.band_blocks(t["l2l_k"], b, axis=2)
    v_blocks = blocking.band_blocks(t["l2l_v"], b, axis=2)
    # [B, H, nb, b, 3b] and [B, H, nb * b, G], in the compute dtype. The
    # l2g scores of the padded queries are computed (zeros) so that their
    # rows match the stream's and the kernel's gradient serves both.
    raw_l2l = tf.matmul(q_blocks, k_blocks, transpose_b=True)
    raw_l2g = tf.matmul(_merge_blocks(q_blocks), t["l2g_k"],
                        transpose_b=True)
    long_streams = {p: _merge_blocks(streams[p]) for p in ("l2l", "l2g")
                    if p in streams}
    p_l2l, p_l2g, new = self._kernel_side(
        ("l2l", "l2g"), _merge_blocks(raw_l2l), raw_l2g,
        (_merge_blocks(side.l2l_adder), _merge_blocks(side.l2g_adder)),
        _merge_blocks(side.long_valid), long_streams, t.get("long_per_id"),
        (side.l2l_ids, side.l2g_ids), True, carried, emit, num_summed,
        running_mean, training, seed, self.dropout_site)
    new_streams = {p: _split_blocks(v, b) for p, v in new.items()}
    long_ctx = _merge_blocks(tf.matmul(_split_blocks(p_l2l, b), v_blocks))
    long_ctx += tf.matmul(p_l2g, t["l2g_v"])
    long_ctx = blocking.slice_last(long_ctx, 0, side.long_len, axis=2)

    # [B, H, G, G] and [B, H, G, L].
    raw_g2g = tf.matmul(t["global_q"], t["g2g_k"], transpose_b=True)
    raw_g2l = tf.matmul(t["global_q"], t["g2l_k"], transpose_b=True)
    p_g2g, p_g2l, new = self._kernel_side(
        ("g2g", "g2l"), raw_g2g, raw_g2l, (side.g2g_adder, side.g2l_adder),
        side.global_valid, streams, t.get("global_per_id"),
        (side.g2g_ids, side.g2l_ids), False, carried, emit, num_summed,
        running_mean, training, seed, self.dropout_site + 2)
    new_streams.update(new)
    global_ctx = (tf.matmul(p_g2g, t["g2g_v"]) +
                  tf.matmul(p_g2l, t["g2l_v"]))
    return long_ctx, global_ctx, new_streams, None

  def _attend_chunked(self, t: Dict[str, tf.Tensor],
                      streams: Mapping[str, tf.Tensor],
                      side: PreparedSideInputs, carried: Tuple[str, ...],
                      num_summed: int, running_mean: bool, training: bool,
                      seed: Optional[tf.Tensor], emit_streams: bool,
                      num_chunks: int,
                      sources: Tuple[Mapping[str, tf.Tensor], ...] = (),
                      fused: bool = False):
    """The sparse `_attend`, cut into chunks of queries (no probabilities).

    Long queries are cut into chunks of whole blocks (l2l and l2g of a chunk
    need only the chunk's blocks, their neighbour blocks of keys and the
    global keys); global queries into chunks of rows (g2g and g2l need all
    keys). Each side runs under `chunked_recompute`, so only one chunk's
    [.., c, 3b] / [.., c, G] / [.., g, L] scores, probabilities and masks
    exist at a time, in the forward and in the backward pass. Dropout masks
    are drawn by rows (`row_dropout`), the same bits as the unchunked sparse
    path. Outputs equal `_attend`'s.

    With `sources` (the earlier layers' score inputs, see
    `EtcConfig.recompute_residual_streams`) the carried streams are not
    inputs: each chunk recomputes the earlier layers' raw scores of its rows
    and sums them in the order the materialized streams would have been, so
    no stream tensor exists whole, and the gradients reach the earlier
    layers' queries, keys and relative scores through the recomputation.

    With `fused`, each chunk's elementwise work (this layer's relative
    scores, streams, masks, softmax, dropout) runs in the fused kernel, its
    dropout rows starting at the chunk's first row.

    Returns:
      (long_ctx <T>[B, H, L, D], global_ctx <T>[B, H, G, D], new_streams).
    """
    r = self.local_radius
    b = r + 1
    long_len = side.long_len
    rate = self.att_dropout_prob
    site = self.dropout_site
    long_per_id, global_per_id = t.get("long_per_id"), t.get("global_per_id")

    def f32(x):
      return tf.cast(x, tf.float32)

    def with_stream(pattern, score, pieces):
      """(new stream or None, logits) for one pattern's chunk."""
      new = None
      if pattern in carried:
        if "s_" + pattern in pieces:
          score = score + pieces["s_" + pattern]
        new = score
        if running_mean and num_summed > 1:
          score = score / float(num_summed)
      return new, score

    def rows(x, start, size, axis):
      return blocking.slice_last(x, start, size, axis)

    def side_probs(start, x, scores_fn, patterns, side_carried, first_site):
      """One side's two patterns for one chunk: raw scores (+ the stored or
      recomputed streams) -> one fused softmax -> row dropout.

      Returns ([probabilities of the two patterns] in the compute dtype,
      {pattern: new stream} when `emit_streams`).
      """
      if fused:
        return fused_side_probs(start, x, scores_fn, patterns, side_carried,
                                first_site)
      own = scores_fn("")
      if sources and side_carried:
        x = {**x, **recomputed_streams(scores_fn, side_carried)}
      out, logits = {}, []
      for pattern in patterns:
        new, logit = with_stream(pattern, own[pattern], x)
        if emit_streams and new is not None:
          out[pattern] = new
        logits.append(logit + x[pattern + "_adder"])
      gain = keep_gain(rate, training)
      probs = fused_softmax(logits[0], logits[1], x["valid"], gain)
      return [tf.cast(row_dropout(p, rate, x.get("seed"), first_site + k,
                                  training, start, prescaled=gain != 1.0),
                      x["q"].dtype)
              for k, p in enumerate(probs)], out

    def fused_side_probs(start, x, scores_fn, patterns, side_carried,
                         first_site):
      """`side_probs` through the fused kernel: the raw q.k scores of this
      layer, everything else in one pass."""
      if sources and side_carried:
        x = {**x, **recomputed_streams(scores_fn, side_carried)}
      long = patterns[0] == "l2l"
      raw = scores_fn("", raw=True)
      raw_a, raw_b = raw[patterns[0]], raw[patterns[1]]
      ids = [x.get(p + "_ids") for p in patterns]
      per_id = x.get("per_id")
      valid = x["valid"]
      adders = [x[p + "_adder"] for p in patterns]
      streams_in = {p: x["s_" + p] for p in patterns if "s_" + p in x}
      if long:  # [B, ., n, b, K] -> [B, ., n * b, K]
        raw_a, raw_b = _merge_blocks(raw_a), _merge_blocks(raw_b)
        adders = [_merge_blocks(v) for v in adders]
        valid = _merge_blocks(valid)
        streams_in = {p: _merge_blocks(v) for p, v in streams_in.items()}
        ids = [None if v is None else _merge_axes(v, 1) for v in ids]
        if per_id is not None:
          per_id = _merge_axes(per_id, 1)
      p_a, p_b, new = self._kernel_side(
          patterns, raw_a, raw_b, tuple(adders), valid, streams_in, per_id,
          tuple(ids), long, side_carried, emit_streams, num_summed,
          running_mean, training, x.get("seed"), first_site, start)
      if long:
        p_a, p_b = _split_blocks(p_a, b), _split_blocks(p_b, b)
        new = {p: _split_blocks(v, b) for p, v in new.items()}
      return [p_a, p_b], new

    def add_carried(inputs, score_inputs, patterns):
      """Adds what the carried `patterns` of one side need: the earlier
      layers' score inputs (named p<i>_...) with `sources`, else the stored
      sums (s_<pattern>)."""
      if sources and patterns:
        for i, src in enumerate(sources):
          inputs.update(score_inputs(src, f"p{i}_"))
        return
      for pattern in patterns:
        if pattern in streams:
          inputs["s_" + pattern] = ChunkInput(streams[pattern])

    # ---------------------------------------------------------- long side
    q_blocks = blocking.split_into_blocks(t["long_q"], b, axis=2)
    nb = q_blocks.shape[2]

    def pad_blocks(x):
      blocks = blocking.split_into_blocks(x, b, axis=2)
      return tf.pad(blocks, [[0, 0], [0, 0], [1, 1], [0, 0], [0, 0]])

    use_l2l_rel = long_per_id is not None and side.l2l_ids is not None
    use_l2g_rel = long_per_id is not None and side.l2g_ids is not None

    def long_score_inputs(src, prefix):
      """The chunk inputs one layer's l2l/l2g raw scores need."""
      out = {prefix + "q": ChunkInput(
          blocking.split_into_blocks(src["long_q"], b, axis=2)),
             prefix + "kp": ChunkInput(pad_blocks(src["l2l_k"]), "halo", 2, 1),
             prefix + "l2g_k": ChunkInput(src["l2g_k"], "shared")}
      if use_l2l_rel or use_l2g_rel:
        # [B, L, R, H] -> [B, nb, b, R, H]
        out[prefix + "per_id"] = ChunkInput(
            blocking.split_into_blocks(src["long_per_id"], b, axis=1), axis=1)
      return out

    long_in = long_score_inputs(t, "")
    long_in.update(vp=ChunkInput(pad_blocks(t["l2l_v"]), "halo", 2, 1),
                   l2g_v=ChunkInput(t["l2g_v"], "shared"))
    long_carried = tuple(p for p in ("l2l", "l2g") if p in carried)
    add_carried(long_in, long_score_inputs, long_carried)
    l2l_ids = (blocking.split_into_blocks(side.l2l_ids, b, axis=1)
               if use_l2l_rel else None)  # [B, nb, b, 2r+1]
    l2g_ids = (blocking.split_into_blocks(side.l2g_ids, b, axis=1)
               if use_l2g_rel else None)  # [B, nb, b, G]

    def long_scores(size, x, prefix, raw=False):
      """l2l [B, H, n, b, 3b] and l2g [B, H, n, b, G] raw scores of the
      layer whose chunk inputs are named `prefix` + ... (`raw`: the q.k
      products only, in the compute dtype)."""
      q = x[prefix + "q"]  # [B, H, n, b, D]
      shape = tf.shape(q)
      batch, heads = shape[0], shape[1]
      c = size * b
      kp = x[prefix + "kp"]
      k3 = tf.concat([rows(kp, k, size, 2) for k in range(3)], axis=3)
      l2l = tf.matmul(q, k3, transpose_b=True)
      q_flat = tf.reshape(q, [batch, heads, c, q.shape[-1]])
      l2g = tf.matmul(q_flat, x[prefix + "l2g_k"], transpose_b=True)
      if raw:
        return {"l2l": l2l,
                "l2g": tf.reshape(l2g, [batch, heads, size, b, -1])}
      l2l, l2g = f32(l2l), f32(l2g)
      if prefix + "per_id" in x:
        per_id = x[prefix + "per_id"]
        per_id = tf.reshape(per_id, tf.concat(
            [[batch, c], tf.shape(per_id)[3:]], 0))
        if use_l2l_rel:
          ids = tf.reshape(x["l2l_ids"], [batch, c, 2 * r + 1])
          rel = tf.reshape(relative_scores(per_id, ids),
                           [batch, heads, size, b, 2 * r + 1])
          l2l += blocking.skew_right(rel, offset=1, width=3 * b)
        if use_l2g_rel:
          ids = tf.reshape(x["l2g_ids"], [batch, c, -1])
          l2g += relative_scores(per_id, ids)
      return {"l2l": l2l, "l2g": tf.reshape(l2g, [batch, heads, size, b, -1])}

    def recomputed_streams(score_fn, patterns):
      """{"s_" + pattern: the earlier layers' running sum} for one chunk."""
      acc = _sum_in_stream_order(
          [lambda i=i: score_fn(f"p{i}_") for i in range(len(sources))],
          patterns)
      return {"s_" + p: v for p, v in acc.items()}

    def long_chunk(start, size, x):
      q = x["q"]  # [B, H, n, b, D]
      shape = tf.shape(q)
      batch, heads = shape[0], shape[1]
      c = size * b
      v3 = tf.concat([rows(x["vp"], k, size, 2) for k in range(3)], axis=3)
      (p_l2l, p_l2g), out = side_probs(
          start, x, lambda prefix, raw=False: long_scores(size, x, prefix,
                                                          raw),
          ("l2l", "l2g"), long_carried, site)
      ctx = tf.matmul(p_l2l, v3)  # [B, H, n, b, D]
      ctx += tf.reshape(
          tf.matmul(tf.reshape(p_l2g, [batch, heads, c, -1]), x["l2g_v"]),
          tf.shape(ctx))
      out["ctx"] = ctx
      return out

    long_consts = {"l2l_adder": ChunkInput(side.l2l_adder),
                   "l2g_adder": ChunkInput(side.l2g_adder),
                   "valid": ChunkInput(side.long_valid)}
    if use_l2l_rel:
      long_consts["l2l_ids"] = ChunkInput(l2l_ids, axis=1)
    if use_l2g_rel:
      long_consts["l2g_ids"] = ChunkInput(l2g_ids, axis=1)
    if seed is not None:
      long_consts["seed"] = ChunkInput(seed, "shared")
    long_part = ChunkedPart(
        long_chunk, long_in, chunk_bounds(nb, num_chunks),
        {"ctx": 2, "l2l": 2, "l2g": 2}, long_consts)

    # -------------------------------------------------------- global side
    global_q = t["global_q"]
    global_len = global_q.shape[2]
    use_g2g_rel = global_per_id is not None and side.g2g_ids is not None
    use_g2l_rel = global_per_id is not None and side.g2l_ids is not None

    def global_score_inputs(src, prefix):
      """The chunk inputs one layer's g2g/g2l raw scores need."""
      out = {prefix + "q": ChunkInput(src["global_q"]),
             prefix + "g2g_k": ChunkInput(src["g2g_k"], "shared"),
             prefix + "g2l_k": ChunkInput(src["g2l_k"], "shared")}
      if use_g2g_rel or use_g2l_rel:
        out[prefix + "per_id"] = ChunkInput(src["global_per_id"], axis=1)
      return out

    global_in = global_score_inputs(t, "")
    global_in.update(g2g_v=ChunkInput(t["g2g_v"], "shared"),
                     g2l_v=ChunkInput(t["g2l_v"], "shared"))
    global_carried = tuple(p for p in ("g2g", "g2l") if p in carried)
    add_carried(global_in, global_score_inputs, global_carried)

    def global_scores(x, prefix, raw=False):
      """g2g [B, H, g, G] and g2l [B, H, g, L] raw scores of the layer whose
      chunk inputs are named `prefix` + ... (`raw`: the q.k products only, in
      the compute dtype)."""
      q = x[prefix + "q"]  # [B, H, g, D]
      g2g = tf.matmul(q, x[prefix + "g2g_k"], transpose_b=True)
      g2l = tf.matmul(q, x[prefix + "g2l_k"], transpose_b=True)
      if raw:
        return {"g2g": g2g, "g2l": g2l}
      g2g, g2l = f32(g2g), f32(g2l)
      if use_g2g_rel:
        g2g += relative_scores(x[prefix + "per_id"], x["g2g_ids"])
      if use_g2l_rel:
        g2l += relative_scores(x[prefix + "per_id"], x["g2l_ids"])
      return {"g2g": g2g, "g2l": g2l}

    def global_chunk(start, size, x):
      (p_g2g, p_g2l), out = side_probs(
          start, x, lambda prefix, raw=False: global_scores(x, prefix, raw),
          ("g2g", "g2l"), global_carried, site + 2)
      out["ctx"] = (tf.matmul(p_g2g, x["g2g_v"]) +
                    tf.matmul(p_g2l, x["g2l_v"]))
      return out

    global_consts = {"g2g_adder": ChunkInput(side.g2g_adder),
                     "g2l_adder": ChunkInput(side.g2l_adder),
                     "valid": ChunkInput(side.global_valid)}
    if use_g2g_rel:
      global_consts["g2g_ids"] = ChunkInput(side.g2g_ids, axis=1)
    if use_g2l_rel:
      global_consts["g2l_ids"] = ChunkInput(side.g2l_ids, axis=1)
    if seed is not None:
      global_consts["seed"] = ChunkInput(seed, "shared")
    global_part = ChunkedPart(
        global_chunk, global_in, chunk_bounds(global_len, num_chunks),
        {"ctx": 2, "g2g": 2, "g2l": 2}, global_consts)

    long_out, global_out = chunked_recompute([long_part, global_part])
    long_ctx = long_out["ctx"]
    shape = tf.shape(long_ctx)
    long_ctx = tf.reshape(long_ctx, [shape[0], shape[1], shape[2] * shape[3],
                                     shape[4]])
    long_ctx = blocking.slice_last(long_ctx, 0, long_len, axis=2)
    new_streams = {p: v for p, v in {**long_out, **global_out}.items()
                   if p != "ctx"}
    return long_ctx, global_out["ctx"], new_streams

  def _canonical_probs(self, probs: Dict[str, tf.Tensor],
                       side: PreparedSideInputs) -> Dict[str, tf.Tensor]:
    r = self.local_radius
    if side.sparse:
      l2l = blocking.blocked_to_window(probs["l2l"], side.long_len, r)
      l2g = probs["l2g"]
      shape = tf.shape(l2g)
      l2g = tf.reshape(l2g, [shape[0], shape[1], shape[2] * shape[3],
                             shape[4]])[:, :, :side.long_len, :]
    else:
      l2l = blocking.full_to_window(probs["l2l"], r)
      l2g = probs["l2g"]
    return {"l2l": l2l, "l2g": l2g, "g2g": probs["g2g"], "g2l": probs["g2l"]}


def _sum_in_stream_order(layer_scores: List[Callable[[], Dict[str, tf.Tensor]]],
                         patterns: Tuple[str, ...]) -> Dict[str, tf.Tensor]:
  """Sums per pattern the scores of layers 0..n-1 (each computed on demand)
  as the stored streams are built, layer i's scores + the sum before, so
  recomputed streams round exactly like stored ones."""
  acc = {}
  for i, scores_fn in enumerate(layer_scores):
    scores = scores_fn()
    for pattern in patterns:
      acc[pattern] = (scores[pattern] if i == 0
                      else scores[pattern] + acc[pattern])
  return acc


def _recomputed(attend, tensors: Dict[str, tf.Tensor],
                streams: Dict[str, tf.Tensor], carried: Tuple[str, ...]):
  """Runs `attend` under `tf.recompute_grad` (tensors in, tensors out)."""
  keys, stream_keys = sorted(tensors), sorted(streams)
  out_keys = sorted(carried)

  @tf.recompute_grad
  def run(*args):
    t = dict(zip(keys, args[:len(keys)]))
    prev = dict(zip(stream_keys, args[len(keys):]))
    long_ctx, global_ctx, new_streams, _ = attend(t, prev, False)
    return (long_ctx, global_ctx) + tuple(new_streams[k] for k in out_keys)

  outs = run(*[tensors[k] for k in keys], *[streams[k] for k in stream_keys])
  return outs[0], outs[1], dict(zip(out_keys, outs[2:]))


def _in_xla_context() -> bool:
  """Whether the op being built is traced for XLA (`jit_compile=True`)."""
  return control_flow_util.GraphOrParentsInXlaContext(
      tf.compat.v1.get_default_graph())


class ChunkInput(NamedTuple):
  """How one input of a chunked computation is cut.

  kind:
    'rows': disjoint pieces along `axis` (chunk `[start, start + size)`);
    'halo': the chunk's rows plus `halo` more on each side (the input is
      already padded by `halo` at both ends); gradients overlap and add;
    'shared': every chunk sees the whole tensor; gradients add.
  """
  value: tf.Tensor
  kind: str = "rows"
  axis: int = 2
  halo: int = 0


def _take(spec: ChunkInput, x: tf.Tensor, start: int, size: int) -> tf.Tensor:
  if spec.kind == "shared":
    # A tensor of its own, so that an input given under two names gets each
    # name's gradient once.
    return tf.identity(x)
  if spec.kind == "rows":
    return blocking.slice_last(x, start, size, spec.axis)
  return blocking.slice_last(x, start, size + 2 * spec.halo, spec.axis)


class ChunkedPart(NamedTuple):
  """One computation for `chunked_recompute`.

  `fn(start, size, pieces)` computes the outputs of rows
  `[start, start + size)` from the pieces of `inputs` and `consts` (see
  `ChunkInput`; `consts` get no gradient); each output is concatenated over
  `chunks` along `out_axes[name]`. `fn` must be a pure function of its
  pieces (no variables, no captured tensors that depend on the chunk; seeded
  randomness only).
  """
  fn: Callable[[int, int, Dict[str, tf.Tensor]], Dict[str, tf.Tensor]]
  inputs: Mapping[str, ChunkInput]
  chunks: List[Tuple[int, int]]
  out_axes: Mapping[str, int]
  consts: Mapping[str, ChunkInput] = {}


def chunked_recompute(parts: Sequence[ChunkedPart]
                      ) -> List[Dict[str, tf.Tensor]]:
  """Runs each part chunk by chunk; the backward pass recomputes one chunk at
  a time.

  Only the parts' inputs are kept for the backward pass. There each chunk's
  forward is recomputed under a tape and differentiated alone, the chunks
  (of all parts, part after part) one after the other, so at most one
  chunk's intermediate tensors (scores, probabilities, masks, their
  gradients) are alive at any time, in the forward pass as in the backward
  pass. The cost is one more forward pass of every `fn`. The parts share one
  custom gradient so that they are sequenced too: with one each, a part
  whose upstream gradient arrives early (the global side's) runs beside
  whatever else the backward pass is doing, and the working sets add up.

  The order is forced by gating every chunk's pieces (identities with control
  inputs on the previous chunk's results): a control input on anything
  else, e.g. the constants of a slice, may be folded away by the graph
  optimizers, and then the executor runs all chunks at once.

  Returns:
    per part, dict name -> the concatenated output.
  """
  parts = list(parts)
  names = [sorted(part.inputs) for part in parts]
  specs = [[part.inputs[n] for n in ns] for part, ns in zip(parts, names)]
  const_names = [sorted(part.consts) for part in parts]
  const_values = [[part.consts[n].value for n in ns]
                  for part, ns in zip(parts, const_names)]
  bounds = [0]
  for ns in names:
    bounds.append(bounds[-1] + len(ns))
  out_names: List[List[str]] = [[] for _ in parts]

  def cut(i: int, k: int, values, deps) -> Dict[str, tf.Tensor]:
    start, size = parts[i].chunks[k]
    pieces = {}
    with tf.control_dependencies(deps):
      for n, spec, v in zip(names[i], specs[i], values):
        pieces[n] = _take(spec, tf.identity(v), start, size)
      for n, v in zip(const_names[i], const_values[i]):
        pieces[n] = tf.stop_gradient(
            _take(parts[i].consts[n], tf.identity(v), start, size))
    return pieces

  def part_grads(i: int, values, dys: Dict[str, tf.Tensor], deps):
    """Gradients of part i's inputs, chunk after chunk (after `deps`)."""
    part = parts[i]
    rows = {n: [] for n, spec in zip(names[i], specs[i])
            if spec.kind == "rows"}
    sums: Dict[str, tf.Tensor] = {}
    for k, (start, size) in enumerate(part.chunks):
      pieces = cut(i, k, values, deps)
      piece_list = [pieces[n] for n in names[i]]
      with tf.GradientTape() as tape:
        tape.watch(piece_list)
        out = part.fn(start, size, pieces)
      targets, out_grads = [], []
      with tf.control_dependencies(deps):
        for n in out_names[i]:
          if dys[n] is None:
            continue
          targets.append(out[n])
          out_grads.append(blocking.slice_last(
              tf.identity(dys[n]), start, size, part.out_axes[n]))
      grads = tape.gradient(
          targets, piece_list, output_gradients=out_grads,
          unconnected_gradients=tf.UnconnectedGradients.ZERO)
      deps = []
      for n, spec, v, g in zip(names[i], specs[i], values, grads):
        if spec.kind == "rows":
          rows[n].append(g)
          deps.append(g)
          continue
        g = tf.cast(g, tf.float32)
        if spec.kind == "halo":
          paddings = [[0, 0]] * v.shape.rank
          total = blocking._dim(v, spec.axis)  # pylint: disable=protected-access
          paddings[spec.axis] = [start, total - start - size - 2 * spec.halo]
          g = tf.pad(g, paddings)
        sums[n] = g if n not in sums else sums[n] + g
        deps.append(sums[n])
    out = []
    for n, spec, v in zip(names[i], specs[i], values):
      if spec.kind == "rows":
        p = rows[n]
        out.append(p[0] if len(p) == 1 else tf.concat(p, axis=spec.axis))
      else:
        out.append(tf.cast(sums[n], v.dtype))
    return out

  @tf.custom_gradient
  def run(*flat):
    values = [flat[bounds[i]:bounds[i + 1]] for i in range(len(parts))]
    result, deps = [], []
    for i, part in enumerate(parts):
      outs = []
      for k in range(len(part.chunks)):
        out = part.fn(*part.chunks[k], cut(i, k, values[i], deps))
        outs.append(out)
        deps = list(out.values())
      out_names[i][:] = sorted(outs[0])
      result.extend(outs[0][n] if len(outs) == 1 else
                    tf.concat([o[n] for o in outs], axis=part.out_axes[n])
                    for n in out_names[i])

    def grad(*dys):
      # The recomputation must wait for the upstream gradients, all of them
      # (else it is merged with the forward pass, runs all chunks at once,
      # or runs beside the rest of the backward pass).
      deps = [d for d in dys if d is not None]
      out, at = [], 0
      for i in range(len(parts)):
        part_dys = dict(zip(out_names[i], dys[at:at + len(out_names[i])]))
        at += len(out_names[i])
        grads = part_grads(i, values[i], part_dys, deps)
        out.extend(grads)
        deps = grads
      return out

    return result, grad

  flat_result = run(*[spec.value for part_specs in specs
                      for spec in part_specs])
  results, at = [], 0
  for ns in out_names:
    results.append(dict(zip(ns, flat_result[at:at + len(ns)])))
    at += len(ns)
  return results


def chunk_bounds(total: int, num_chunks: int) -> List[Tuple[int, int]]:
  """(start, size) of `num_chunks` (or fewer) near-equal pieces of `total`."""
  size = -(-total // max(1, num_chunks))
  return [(s, min(size, total - s)) for s in range(0, total, size)]


def _merge_axes(x: tf.Tensor, axis: int) -> tf.Tensor:
  """Merges axes `axis` and `axis + 1` (a free reshape)."""
  dims = [blocking._dim(x, i) for i in range(x.shape.rank)]  # pylint: disable=protected-access
  return tf.reshape(x, dims[:axis] + [dims[axis] * dims[axis + 1]] +
                    dims[axis + 2:])


def _merge_blocks(x: tf.Tensor) -> tf.Tensor:
  """<T>[B, X, nb, b, K] -> [B, X, nb * b, K]."""
  return _merge_axes(x, 2)


def _split_blocks(x: tf.Tensor, block_len: int) -> tf.Tensor:
  """<T>[B, X, nb * b, K] -> [B, X, nb, b, K]."""
  dims = [blocking._dim(x, i) for i in range(x.shape.rank)]  # pylint: disable=protected-access
  return tf.reshape(x, dims[:2] + [dims[2] // block_len, block_len] +
                    dims[3:])


def _merge_heads(x: tf.Tensor) -> tf.Tensor:
  """<T>[B, H, N, D] -> <T>[B, N, H*D]."""
  x = tf.transpose(x, [0, 2, 1, 3])
  shape = tf.shape(x)
  heads, size = x.shape[2], x.shape[3]
  return tf.reshape(x, [shape[0], shape[1], heads * size])
