"""`FusedGlobalLocalAttention`: one layer of ETC attention, RealFormer-ready.

The layer owns the weights (query/key/value projections per pattern, shared
as the config says, the two relative tables, the two output projections). A
call is three steps:

* projection (`_project`): queries, keys, values and relative scores per id
  of both branches (`Projections`);
* plan: how to run (`plan_attention`), what each branch computes
  (`_branch_specs`: `core.BranchSpec`), and each branch's typed pieces
  in the core's layouts (`_branch_inputs`: `pieces.BranchInputs`,
  with the RealFormer streams of `attention.streams`);
* strategy (`attend_branches`): the attention core
  (`core.attend_branch`, one call per branch), run
  - whole: each branch's core on all its queries at once;
  - chunked: the sparse path's queries cut into chunks of rows, each
    computed and, in the backward pass, recomputed alone
    (`chunking.chunked_recompute`): one chunk's score tensors alive at a
    time;
  - recomputed: the same with a single chunk: only the core's inputs are
    kept for the backward pass.

The three strategies run the same core on the same pieces, so they agree to float32
rounding, dropout masks included. A row whose keys are all masked gets
all-zero probabilities (the attention output of that query is zero). The
original would spread it uniformly over whatever keys its layout happens to
hold, which differs between the blocked and the dense layouts; zero is
layout-independent and finite in every dtype.
"""

import functools
import math
from typing import (Any, Dict, List, Mapping, NamedTuple, Optional, Sequence,
                    Tuple, Union)

from absl import logging
import tensorflow as tf
import tf_keras

from etc_realformer.attention import blocking
from etc_realformer.attention import core
from etc_realformer.attention import dropout as dropout_lib
from etc_realformer.attention import fused as fused_lib
from etc_realformer.attention.chunking import chunk_bounds
from etc_realformer.attention.chunking import chunked_recompute
from etc_realformer.attention.chunking import ChunkedPart
from etc_realformer.attention.masks import PreparedSideInputs
from etc_realformer.attention.pieces import branch_inputs
from etc_realformer.attention.pieces import BranchInputs
from etc_realformer.attention.pieces import BranchOutputs
from etc_realformer.attention.pieces import chunk_cuts
from etc_realformer.attention.pieces import PatternPair
from etc_realformer.attention.pieces import ScoreInputs
from etc_realformer.attention.relative_table import RelativeTable
from etc_realformer.attention.streams import as_recomputed
from etc_realformer.attention.streams import as_summed
from etc_realformer.attention.streams import LayerScoreInputs
from etc_realformer.attention.streams import NO_STREAMS
from etc_realformer.attention.streams import Streams
from etc_realformer.attention.streams import SummedStreams
from etc_realformer.execution import ExecutionConfig
from etc_realformer.layers.initializers import SharedOrthogonal
from etc_realformer.layers.projections import HeadProjection
from etc_realformer.layers.projections import Linear
from etc_realformer.layers.projections import merge_heads
from etc_realformer.layers.xla_context import in_xla_context

# In the order of the released checkpoints' variables (and of creation).
_PROJECTIONS = ("long_query", "global_query", "l2l_key", "l2g_key",
                "g2g_key", "g2l_key", "l2l_value", "l2g_value", "g2g_value",
                "g2l_value")
# Attribute order (that of `trainable_variables`).
_ATTRIBUTE_ORDER = ("long_query", "l2l_key", "l2l_value", "l2g_key",
                    "l2g_value", "global_query", "g2g_key", "g2g_value",
                    "g2l_key", "g2l_value")


def _static_branch_specs(layer_index: int, local_radius: int,
                         residual_patterns: Tuple[str, ...],
                         residual_running_mean: bool, dropout_rate: float,
                         execution: ExecutionConfig
                         ) -> Tuple[core.BranchSpec, core.BranchSpec]:
  """The long and the global branch's specs as far as the layer fixes them
  (patterns, band, streams, dropout sites, softmax precision)."""
  site = dropout_lib.layer_sites(layer_index)
  return tuple(
      core.BranchSpec(
          patterns=patterns, block_len=local_radius + 1,
          streams=core.StreamSpec(
              carried=tuple(p for p in patterns if p in residual_patterns),
              num_summed=layer_index + 1,
              running_mean=residual_running_mean,
              low_precision=execution.stream_dtype == "compute"),
          dropout=core.ProbsDropout(
              rate=dropout_rate,
              first_site=(site +
                          dropout_lib.ATTENTION_PROBS_OFFSET[patterns[0]]),
              rng=execution.dropout_rng),
          low_precision_softmax=execution.softmax_dtype == "compute")
      for patterns in (("l2l", "l2g"), ("g2g", "g2l")))

class Projections(NamedTuple):
  """One call's projections, each computed once even where shared.

  Attributes:
    scores: both branches' score inputs: queries <T>[B, H, N, D]
      (pre-scaled by 1 / sqrt(D)), keys per pattern [B, H, K, D], relative
      scores per id <float32>[B, N, R, H] (None without relative tables).
    long_values: (l2l, l2g) values <T>[B, H, L, D], [B, H, G, D].
    global_values: (g2g, g2l) values <T>[B, H, G, D], [B, H, L, D].
  """
  scores: LayerScoreInputs
  long_values: PatternPair[tf.Tensor]
  global_values: PatternPair[tf.Tensor]


class AttentionPlan(NamedTuple):
  """How one call runs the core (see `plan_attention`).

  Attributes:
    num_chunks: 0 = whole; n >= 1 = `chunked_recompute` in n chunks of
      queries per branch (1 = recomputed whole in the backward pass).
    stream_sources: carry the residual streams as the layers' score inputs.
    fused: run the branches the fused kernels cover as custom calls, whole
      (`ExecutionConfig.attention_kernel = 'fused'`, under XLA, unless
      `recompute_attention` asks for the XLA path's recomputation); the
      others as `num_chunks` says.
  """
  num_chunks: int
  stream_sources: bool
  fused: bool = False


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
  # The kernels keep nothing score-sized for the backward pass, and rebuild
  # recomputed streams there themselves; a branch they do not cover runs as
  # `num_chunks` says.
  fused = (execution.attention_kernel == "fused" and in_xla and
           not (execution.recompute_attention and training))
  return AttentionPlan(num_chunks, sources, fused)


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
    self.share_att_output_projection = share_att_output_projection
    self.residual_patterns = tuple(residual_patterns)
    self.execution = execution or ExecutionConfig()
    # What the long and the global branch compute, as far as no call changes
    # it (`_branch_specs` adds the call's part).
    self._static_specs = _static_branch_specs(
        layer_index, local_radius, self.residual_patterns,
        residual_running_mean, attention_probs_dropout_prob, self.execution)

    value_init = output_init = query_key_init = initializer
    if value_output_identity_init:
      shared = SharedOrthogonal()
      value_init = shared.initializer()
      output_init = shared.transposed_initializer(value_output_identity_init)
    if query_key_identity_init:
      query_key_init = SharedOrthogonal().initializer(
          math.sqrt(query_key_identity_init))
    self._add_projections(value_init, query_key_init, share_kv_projections,
                          share_qkv_projections)

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

  def _add_projections(self, value_init, query_key_init,
                       share_kv_projections: bool,
                       share_qkv_projections: bool) -> None:
    """Sets `<name>_projection` for every projection name, in the
    original's attribute order; a shared one is the same layer object."""
    def proj(name):
      init = value_init if name.endswith("value") else query_key_init
      return HeadProjection(self.num_heads, self.size_per_head, init,
                            name=name + "_projection")

    # The original's sharing: which projections are one and the same.
    same_as = {}
    if share_qkv_projections or share_kv_projections:
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
           side_inputs: PreparedSideInputs,
           streams: Streams = NO_STREAMS,
           training: bool = False,
           seed: Optional[tf.Tensor] = None,
           return_probs: bool = False,
           emit_streams: bool = True):
    """Runs one layer of fused global-local attention.

    Projection (`_project`), plan (`plan_attention`, `_branch_specs`,
    `_branch_inputs`), strategy (`attend_branches`), then the output
    projections.

    Args:
      long_input: <T>[B, L, hidden].
      global_input: <T>[B, G, hidden].
      side_inputs: `PreparedSideInputs` (also fixes sparse vs full).
      streams: the earlier layers' RealFormer streams (`attention.streams`):
        `SummedStreams`, or with `recompute_residual_streams`
        `RecomputedStreams`; `NO_STREAMS` in the first layer.
      training: apply attention-probability dropout.
      seed: <int32>[2] per-call dropout seed.
      return_probs: also return the attention probabilities.
      emit_streams: return the new streams (False for the last layer, whose
        streams nobody reads: they are then never built whole).

    Returns:
      (long_output <T>[B, L, hidden], global_output <T>[B, G, hidden],
       new_streams (the form of `streams`; `NO_STREAMS` when not
       `emit_streams`),
       probs: None, or dict pattern -> <float32> probabilities in canonical
       layouts: l2l [B, H, L, 2r+1], l2g [B, H, L, G], g2g [B, H, G, G],
       g2l [B, H, G, L]).
    """
    projected = self._project(long_input, global_input)
    plan = plan_attention(self.execution, side_inputs.sparse,
                          side_inputs.long_len,
                          projected.scores.global_branch.q.shape[2],
                          training, return_probs, bool(self.residual_patterns),
                          in_xla_context())
    specs = self._branch_specs(plan, side_inputs.sparse, training,
                               return_probs, emit_streams)
    inputs = self._branch_inputs(specs, projected, side_inputs, streams,
                                 plan.stream_sources, seed)
    long_out, global_out = attend_branches(specs, inputs, plan.num_chunks,
                                           plan.fused)

    if not emit_streams:
      new_streams = NO_STREAMS
    elif plan.stream_sources:
      new_streams = as_recomputed(streams).then(projected.scores)
    else:
      new_streams = SummedStreams.of_branches(long_out.sums,
                                              global_out.sums)
    probs = None
    if return_probs:
      probs = self._canonical_probs(long_out.probs, global_out.probs,
                                    side_inputs)

    long_ctx = long_out.ctx
    if side_inputs.sparse:  # [B, H, nb, b, D] -> [B, H, L, D]
      long_ctx = blocking.slice_last(blocking.merge_axes(long_ctx, 2), 0,
                                     side_inputs.long_len, axis=2)
    long_output = self.long_output_projection(merge_heads(long_ctx))
    global_output = self.global_output_projection(
        merge_heads(global_out.ctx))
    return long_output, global_output, new_streams, probs

  def _project(self, long_input: tf.Tensor, global_input: tf.Tensor
               ) -> Projections:
    """Queries, keys, values and relative scores per id of both branches.

    The relative scores per id read the tables (variables), so they are
    made here, outside the (possibly recomputed) core.
    """
    scale = 1.0 / math.sqrt(self.size_per_head)
    cache = {}

    def project(name: str, x: tf.Tensor) -> tf.Tensor:
      layer = self.projection(name)
      key = (id(layer), id(x))  # Each layer once per input.
      if key not in cache:
        cache[key] = layer(x)
      return cache[key]

    # Scaling the queries (an [N, D] tensor) instead of the scores (an
    # [N, keys] tensor) saves a full pass over every score tensor; the bias
    # takes the same factor, so every score is (q.k + q.e + b) / sqrt(d).
    long_q = project("long_query", long_input)
    long_q *= tf.cast(scale, long_q.dtype)
    global_q = project("global_query", global_input)
    global_q *= tf.cast(scale, global_q.dtype)
    keys, values = {}, {}
    for pattern, keys_in in (("l2l", long_input), ("l2g", global_input),
                             ("g2g", global_input), ("g2l", long_input)):
      keys[pattern] = project(pattern + "_key", keys_in)
      values[pattern] = project(pattern + "_value", keys_in)
    long_per_id = global_per_id = None
    if self.long_relative is not None:
      long_per_id = self.long_relative.scores_per_id(long_q, scale)
      global_per_id = self.global_relative.scores_per_id(global_q, scale)
    return Projections(
        scores=LayerScoreInputs(
            long_branch=ScoreInputs(
                long_q, PatternPair(keys["l2l"], keys["l2g"]), long_per_id),
            global_branch=ScoreInputs(
                global_q, PatternPair(keys["g2g"], keys["g2l"]),
                global_per_id)),
        long_values=PatternPair(values["l2l"], values["l2g"]),
        global_values=PatternPair(values["g2g"], values["g2l"]))

  def _branch_specs(self, plan: AttentionPlan, sparse: bool,
                    training: bool, return_probs: bool, emit_streams: bool
                    ) -> Tuple[core.BranchSpec, core.BranchSpec]:
    """What the long and the global branch compute in this call (the
    sparse path's long branch: the blocked band, dropout by rows)."""
    long_spec, global_spec = (
        spec._replace(
            streams=spec.streams._replace(
                emit=emit_streams and not plan.stream_sources),
            dropout=spec.dropout._replace(training=training, by_rows=sparse),
            return_probs=return_probs)
        for spec in self._static_specs)
    return long_spec._replace(band=sparse), global_spec

  def _branch_inputs(self, specs: Tuple[core.BranchSpec, core.BranchSpec],
                     projected: Projections, side_inputs: PreparedSideInputs,
                     streams: Streams, stream_sources: bool,
                     seed: Optional[tf.Tensor]
                     ) -> Tuple[BranchInputs[tf.Tensor],
                                BranchInputs[tf.Tensor]]:
    """The long and the global branch's pieces in the core's layouts."""
    relative = self.long_relative is not None
    if stream_sources:
      sums, sources = NO_STREAMS, as_recomputed(streams).sources
    else:
      sums, sources = as_summed(streams), ()
    long_spec, global_spec = specs
    long_in = branch_inputs(
        long_spec.band, long_spec.block_len, long_spec.is_carried,
        projected.scores.long_branch, projected.long_values,
        side_inputs.long_masks(relative), sums.long_branch,
        [s.long_branch for s in sources], seed)
    global_in = branch_inputs(
        global_spec.band, global_spec.block_len, global_spec.is_carried,
        projected.scores.global_branch, projected.global_values,
        side_inputs.global_masks(relative), sums.global_branch,
        [s.global_branch for s in sources], seed)
    return long_in, global_in

  def _canonical_probs(self, long_probs: PatternPair[tf.Tensor],
                       global_probs: PatternPair[tf.Tensor],
                       side_inputs: PreparedSideInputs
                       ) -> Dict[str, tf.Tensor]:
    """The probabilities by pattern, l2l in the window layout and l2g
    unblocked (see `call`)."""
    r = self.local_radius
    l2l, l2g = long_probs
    if side_inputs.sparse:
      l2l = blocking.blocked_to_window(l2l, side_inputs.long_len, r)
      l2g = blocking.slice_last(blocking.merge_axes(l2g, 2), 0,
                                side_inputs.long_len, axis=2)
    else:
      l2l = blocking.full_to_window(l2l, r)
    g2g, g2l = global_probs
    return {"l2l": l2l, "l2g": l2g, "g2g": g2g, "g2l": g2l}


# ---------------------------------------------------------------- strategy
def attend_branches(specs: Sequence[core.BranchSpec],
                    inputs: Sequence[BranchInputs[tf.Tensor]],
                    num_chunks: int, fused: bool = False
                    ) -> List[BranchOutputs[tf.Tensor]]:
  """Runs the core on each branch: whole, or (`num_chunks` >= 1) under
  `chunked_recompute` in that many chunks of rows per branch (1: recomputed
  whole in the backward pass); with `fused`, the branches the fused kernels
  cover as custom calls (whole); see `plan_attention`."""
  outputs = [None] * len(specs)
  rest = list(range(len(specs)))
  if fused:
    rest = [i for i in rest
            if not fused_lib.covers_or_log(specs[i], inputs[i])]
    for i in range(len(specs)):
      if i not in rest:
        outputs[i] = fused_lib.fused_branch(specs[i], inputs[i])
  if not num_chunks:
    for i in rest:
      outputs[i] = core.attend_branch(specs[i], 0,
                                      blocking.dim(inputs[i].scores.q, 2),
                                      inputs[i])
  elif rest:
    outputs_rest = chunked_recompute([
        ChunkedPart(functools.partial(core.attend_branch, specs[i]),
                    chunk_cuts(specs[i].band, inputs[i]),
                    _chunks(inputs[i].scores.q, num_chunks), out_axes=2)
        for i in rest])
    for i, out in zip(rest, outputs_rest):
      outputs[i] = out
  return outputs


def _chunks(queries: tf.Tensor, num_chunks: int):
  """(start, size) of the chunks of a branch's query rows (axis 2)."""
  rows = blocking.dim(queries, 2)
  if isinstance(rows, int):
    return chunk_bounds(rows, num_chunks)
  return [(0, rows)]  # Dynamic: one chunk (recomputed, not cut).
