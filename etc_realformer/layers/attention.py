"""`FusedGlobalLocalAttention`: one layer of ETC attention, RealFormer-ready.

The layer owns the weights (query/key/value projections per pattern, shared
as the config says, the two relative tables, the two output projections) and
chooses how to run the attention core (`attention_core.attend_side`, one
call per query side):

* whole: each side's core on all its queries at once;
* chunked: the sparse path's queries cut into chunks of rows, each computed
  and, in the backward pass, recomputed alone (`chunking.chunked_recompute`):
  one chunk's score tensors alive at a time;
* recomputed: the same with a single chunk: only the core's inputs are kept
  for the backward pass.

All three run the same core on the same pieces, so they agree to float32
rounding, dropout masks included. A row whose keys are all masked gets
all-zero probabilities (the attention output of that query is zero). The
original would spread it uniformly over whatever keys its layout happens to
hold, which differs between the blocked and the dense layouts; zero is
layout-independent and finite in every dtype.
"""

import math
from typing import (Any, Dict, List, Mapping, NamedTuple, Optional, Sequence,
                    Tuple, Union)

from absl import logging
import tensorflow as tf
import tf_keras

from etc_realformer.execution import ExecutionConfig
from etc_realformer.layers import attention_core as core
from etc_realformer.layers import blocking
from etc_realformer.layers import dropout as dropout_lib
from etc_realformer.layers.attention_inputs import PreparedSideInputs
from etc_realformer.layers.chunking import ChunkedPart
from etc_realformer.layers.chunking import chunk_bounds
from etc_realformer.layers.chunking import chunked_recompute
from etc_realformer.layers.initializers import SharedOrthogonal
from etc_realformer.layers.projections import HeadProjection
from etc_realformer.layers.projections import Linear
from etc_realformer.layers.projections import merge_heads
from etc_realformer.layers.relative_table import RelativeTable
from etc_realformer.layers.xla_context import in_xla_context

# With `ExecutionConfig.recompute_residual_streams`, the streams dict holds
# one entry under this key: the earlier layers' score inputs.
SOURCES = "sources"

# In the order of the released checkpoints' variables (and of creation).
_PROJECTIONS = ("long_query", "global_query", "l2l_key", "l2g_key",
                "g2g_key", "g2l_key", "l2l_value", "l2g_value", "g2g_value",
                "g2l_value")
# Attribute order (that of `trainable_variables`).
_ATTRIBUTE_ORDER = ("long_query", "l2l_key", "l2l_value", "l2g_key",
                    "l2g_value", "global_query", "g2g_key", "g2g_value",
                    "g2l_key", "g2l_value")


class AttentionPlan(NamedTuple):
  """How one call runs the core (see `plan_attention`).

  Attributes:
    num_chunks: 0 = whole; n >= 1 = `chunked_recompute` in n chunks of
      queries per side (1 = recomputed whole in the backward pass).
    stream_sources: carry the residual streams as the layers' score inputs.
  """
  num_chunks: int
  stream_sources: bool


def plan_attention(execution: ExecutionConfig, sparse: bool, long_len: Any,
                   global_len: Any, training: bool, return_probs: bool,
                   carries_streams: bool, in_xla: bool) -> AttentionPlan:
  """Chooses the strategy of one layer's call.

  Args:
    execution: the encoder's execution choices.
    sparse: the blocked (sparse) path.
    long_len, global_len: the lengths, ints when static.
    training: a training call (recomputation only pays there).
    return_probs: probabilities are returned (always whole).
    carries_streams: the layer carries RealFormer streams.
    in_xla: traced for XLA, where chunking does not bound memory.
  """
  sources = execution.recompute_residual_streams and carries_streams
  if return_probs:
    return AttentionPlan(0, sources)
  chunkable = (sparse and isinstance(long_len, int) and
               isinstance(global_len, int))
  num_chunks = 0
  chunk_len = execution.chunk_len_for(long_len)
  if chunkable and chunk_len and in_xla:
    # XLA schedules the chunks by its own lights (the control edges that
    # sequence them do not bound its memory, nor did an optimization
    # barrier): float32 fwd+bwd at L = 8192 peaked at 7.8 GiB chunked
    # against 6.1 unchunked, at the same speed (docs/benchmarks.md).
    logging.log_first_n(
        logging.INFO, "attention_chunk_len %s ignored under XLA "
        "(jit_compile): the chunk order that bounds memory does not hold "
        "there.", 1, chunk_len)
  elif chunkable and chunk_len:
    num_chunks = -(-long_len // chunk_len)
    if num_chunks == 1:
      num_chunks = 0
  if execution.recompute_attention and training:
    num_chunks = max(num_chunks, 1)
  if sources and chunkable:
    # Recomputed streams only save memory where the sums are rebuilt chunk
    # by chunk in the backward pass too.
    num_chunks = max(num_chunks, 1)
  return AttentionPlan(num_chunks, sources)


class FusedGlobalLocalAttention(tf_keras.layers.Layer):
  """ETC attention for one layer, with optional RealFormer score streams.

  Weight names follow the released checkpoints (`long_query_projection`,
  `l2l_key_projection`, ..., `long_output_projection`, the two relative
  tables); projections that a sharing option makes identical exist once.
  """

  def __init__(self,
               hidden_size: int,
               num_attention_heads: int,
               size_per_head: int,
               local_radius: int,
               relative_vocab_size: Optional[int],
               attention_probs_dropout_prob: float,
               initializer,
               share_kv_projections: bool = False,
               share_qkv_projections: bool = True,
               share_att_output_projection: bool = False,
               layer_index: int = 0,
               residual_patterns: Tuple[str, ...] = (),
               residual_running_mean: bool = False,
               execution: Optional[ExecutionConfig] = None,
               global_relative_initial_biases: Optional[Mapping[
                   int, Union[float, Sequence[float]]]]
               = None,
               value_output_identity_init: float = 0.0,
               query_key_identity_init: float = 0.0,
               **kwargs):
    """Args are `EtcConfig`'s fields of the same names, and:

    Args:
      layer_index: this layer's index (dropout sites, running mean).
      residual_patterns: the patterns whose scores RealFormer carries
        (empty: residual attention off).
      residual_running_mean: softmax the running mean of the streams.
      execution: how to run the core (default `ExecutionConfig()`).
      global_relative_initial_biases: {relative id: initial bias, one for
        all heads or one per head} of the global queries' relative table.
      value_output_identity_init: when > 0, value kernels start as one
        orthogonal Q and output kernels as this factor times Q^T.
      query_key_identity_init: when > 0, query and key kernels start as
        sqrt(factor) times one orthogonal Q.
    """
    super().__init__(**kwargs)
    num_heads = num_attention_heads
    self.hidden_size = hidden_size
    self.num_heads = num_heads
    self.size_per_head = size_per_head
    self.local_radius = local_radius
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.share_att_output_projection = share_att_output_projection
    self.layer_index = layer_index
    self.residual_patterns = tuple(residual_patterns)
    self.residual_running_mean = residual_running_mean
    self.execution = execution or ExecutionConfig()
    self.dropout_site = dropout_lib.layer_sites(layer_index)

    value_init = output_init = query_key_init = initializer
    if value_output_identity_init:
      shared = SharedOrthogonal()
      value_init = shared.initializer()
      output_init = shared.transposed_initializer(value_output_identity_init)
    if query_key_identity_init:
      query_key_init = SharedOrthogonal().initializer(
          math.sqrt(query_key_identity_init))

    def proj(name):
      init = value_init if name.endswith("value") else query_key_init
      return HeadProjection(num_heads, size_per_head, init,
                            name=name + "_projection")

    # The original's sharing: which projections are one and the same.
    share_long_kv = share_qkv_projections or share_kv_projections
    same_as = {}
    if share_long_kv:
      same_as.update(l2g_key="l2l_key", l2g_value="l2l_value")
    if share_qkv_projections:
      same_as.update(global_query="long_query", g2g_key="l2l_key",
                     g2g_value="l2l_value", g2l_key="l2l_key",
                     g2l_value="l2l_value")
    elif share_kv_projections:
      same_as.update(g2l_key="g2g_key", g2l_value="g2g_value")
    for name in _ATTRIBUTE_ORDER:
      layer = (getattr(self, same_as[name] + "_projection")
               if name in same_as else proj(name))
      setattr(self, name + "_projection", layer)

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
  def projection(self, name: str) -> HeadProjection:
    """The projection of `name` (e.g. 'l2g_key'), shared or not."""
    return getattr(self, name + "_projection")

  def _unique_projections(self) -> Dict[str, HeadProjection]:
    seen, unique = set(), {}
    for name in _PROJECTIONS:
      layer = self.projection(name)
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
           streams: Optional[Mapping[str, Any]] = None,
           training: bool = False,
           seed: Optional[tf.Tensor] = None,
           return_probs: bool = False,
           emit_streams: bool = True):
    """Runs one layer of fused global-local attention.

    Args:
      long_input: <T>[B, L, hidden].
      global_input: <T>[B, G, hidden].
      side: `PreparedSideInputs` (also fixes sparse vs full).
      streams: the previous layers' running score sums of the carried
        patterns (absent in the first layer), in the core's layouts; with
        `recompute_residual_streams`, `{SOURCES: [one dict of score inputs
        per earlier layer]}`.
      training: apply attention-probability dropout.
      seed: <int32>[2] per-call dropout seed.
      return_probs: also return the attention probabilities.
      emit_streams: return the new running sums (False for the last layer,
        whose streams nobody reads: they are then never built whole).

    Returns:
      (long_output <T>[B, L, hidden], global_output <T>[B, G, hidden],
       new_streams (like `streams`; {} when not `emit_streams`),
       probs: None, or dict pattern -> <float32> probabilities in canonical
       layouts: l2l [B, H, L, 2r+1], l2g [B, H, L, G], g2g [B, H, G, G],
       g2l [B, H, G, L]).
    """
    streams = streams or {}
    scale = 1.0 / math.sqrt(self.size_per_head)

    # Projections, each computed once even when shared between patterns.
    cache = {}

    def project(name, x, which):
      layer = self.projection(name)
      key = (id(layer), which)
      if key not in cache:
        cache[key] = layer(x)
      return cache[key]

    # Scaling the queries (an [N, D] tensor) instead of the scores (an
    # [N, keys] tensor) saves a full pass over every score tensor; the bias
    # takes the same factor, so every score is (q.k + q.e + b) / sqrt(d).
    long_q = project("long_query", long_input, "long")
    long_q *= tf.cast(scale, long_q.dtype)
    global_q = project("global_query", global_input, "global")
    global_q *= tf.cast(scale, global_q.dtype)
    long_t = {"q": long_q}
    global_t = {"q": global_q}
    for pattern, t, keys_in in (("l2l", long_t, long_input),
                                ("l2g", long_t, global_input),
                                ("g2g", global_t, global_input),
                                ("g2l", global_t, long_input)):
      which = "long" if keys_in is long_input else "global"
      t[pattern + "_k"] = project(pattern + "_key", keys_in, which)
      t[pattern + "_v"] = project(pattern + "_value", keys_in, which)
    # Relative scores per id read the tables (variables), so they are made
    # here, outside the (possibly recomputed) core.
    if self.long_relative is not None:
      long_t["per_id"] = self.long_relative.scores_per_id(long_q, scale)
      global_t["per_id"] = self.global_relative.scores_per_id(global_q,
                                                               scale)

    carried = self.residual_patterns
    plan = plan_attention(self.execution, side.sparse, side.long_len,
                          global_q.shape[2], training, return_probs,
                          bool(carried), in_xla_context())
    sources: List[Dict[str, Dict[str, tf.Tensor]]] = []
    if plan.stream_sources:
      sources = list(streams.get(SOURCES, ()))
    rate = self.attention_probs_dropout_prob

    def spec(patterns, band):
      side_carried = tuple(p for p in patterns if p in carried)
      return core.SideSpec(
          patterns=patterns, band=band, block_len=self.local_radius + 1,
          carried=side_carried, num_summed=self.layer_index + 1,
          running_mean=self.residual_running_mean,
          emit=emit_streams and not plan.stream_sources,
          num_sources=len(sources) if side_carried else 0,
          rate=rate, training=training,
          first_site=(self.dropout_site +
                      dropout_lib.ATTENTION_PROBS_OFFSET[patterns[0]]),
          by_rows=side.sparse, return_probs=return_probs,
          low_precision_softmax=self.execution.softmax_dtype == "compute",
          low_precision_streams=self.execution.stream_dtype == "compute",
          dropout_rng=self.execution.dropout_rng)

    has_rel = self.long_relative is not None
    long_spec = spec(("l2l", "l2g"), side.sparse)
    long_masks = {"l2l_adder": side.l2l_adder, "l2g_adder": side.l2g_adder,
                  "valid": side.long_valid,
                  "l2l_ids": side.l2l_ids if has_rel else None,
                  "l2g_ids": side.l2g_ids if has_rel else None}
    global_spec = spec(("g2g", "g2l"), False)
    global_masks = {"g2g_adder": side.g2g_adder, "g2l_adder": side.g2l_adder,
                    "valid": side.global_valid,
                    "g2g_ids": side.g2g_ids if has_rel else None,
                    "g2l_ids": side.g2l_ids if has_rel else None}
    parts = []
    for s, t, masks, key in ((long_spec, long_t, long_masks, "long"),
                             (global_spec, global_t, global_masks, "global")):
      side_sources = [{"q": src[key + "_q"],
                       "per_id": src.get(key + "_per_id"),
                       **{p + "_k": src[p + "_k"] for p in s.patterns}}
                      for src in sources]
      inputs, consts = core.side_inputs(s, t, masks, streams, side_sources,
                                        seed)
      parts.append((s, inputs, consts))

    if plan.num_chunks:
      outs = chunked_recompute([
          ChunkedPart(
              lambda start, size, x, s=s: core.attend_side(s, start, size, x),
              inputs, _chunks(inputs["q"].value, plan.num_chunks),
              {name: 2 for name in _output_names(s)}, consts)
          for s, inputs, consts in parts])
    else:
      outs = []
      for s, inputs, consts in parts:
        pieces = {k: v.value for k, v in {**inputs, **consts}.items()}
        outs.append(core.attend_side(s, 0, blocking.dim(pieces["q"], 2),
                                     pieces))
    long_out, global_out = outs

    long_ctx = long_out["ctx"]
    if side.sparse:  # [B, H, nb, b, D] -> [B, H, L, D]
      long_ctx = blocking.slice_last(blocking.merge_axes(long_ctx, 2), 0,
                                     side.long_len, axis=2)
    new_streams = {}
    if emit_streams and plan.stream_sources and carried:
      own = {"long_q": long_q, "global_q": global_q,
             "long_per_id": long_t.get("per_id"),
             "global_per_id": global_t.get("per_id"),
             **{p + "_k": t[p + "_k"] for p, t in (
                 ("l2l", long_t), ("l2g", long_t), ("g2g", global_t),
                 ("g2l", global_t))}}
      new_streams = {SOURCES: sources + [own]}
    elif emit_streams:
      for out in outs:
        new_streams.update({k.split("/", 1)[1]: v for k, v in out.items()
                            if k.startswith("stream/")})
    probs = None
    if return_probs:
      probs = self._canonical_probs(
          {k.split("/", 1)[1]: v for out in outs for k, v in out.items()
           if k.startswith("probs/")}, side)

    long_output = self.long_output_projection(merge_heads(long_ctx))
    global_output = self.global_output_projection(
        merge_heads(global_out["ctx"]))
    return long_output, global_output, new_streams, probs

  def _canonical_probs(self, probs: Dict[str, tf.Tensor],
                       side: PreparedSideInputs) -> Dict[str, tf.Tensor]:
    r = self.local_radius
    if side.sparse:
      l2l = blocking.blocked_to_window(probs["l2l"], side.long_len, r)
      l2g = blocking.slice_last(blocking.merge_axes(probs["l2g"], 2), 0,
                                side.long_len, axis=2)
    else:
      l2l = blocking.full_to_window(probs["l2l"], r)
      l2g = probs["l2g"]
    return {"l2l": l2l, "l2g": l2g, "g2g": probs["g2g"], "g2l": probs["g2l"]}


def _chunks(queries: tf.Tensor, num_chunks: int):
  """(start, size) of the chunks of a side's query rows (axis 2)."""
  rows = blocking.dim(queries, 2)
  if isinstance(rows, int):
    return chunk_bounds(rows, num_chunks)
  return [(0, rows)]  # Dynamic: one chunk (recomputed, not cut).


def _output_names(spec: core.SideSpec) -> List[str]:
  names = ["ctx"]
  if spec.emit:
    names += ["stream/" + p for p in spec.carried]
  return names
