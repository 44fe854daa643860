"""`EtcModel`: the ETC(-RealFormer) encoder (embeddings + layer stack).

    model = EtcModel(config)
    long_output, global_output = model(features, training=False)

`features` holds `token_ids` <int32>[B, L], `global_token_ids` [B, G],
optionally `segment_ids`, `global_segment_ids`, `position_ids`,
`global_position_ids`, `long_embedding_adder`, `global_embedding_adder`, and
the eight side inputs made by `etc_realformer.features.side_inputs`
(`l2l_att_mask` [B, L, 2r+1], `g2g_att_mask` [B, G, G], `l2g_att_mask`
[B, L, G], `g2l_att_mask` [B, G, L] and the four `*_relative_att_ids`).
Other keys (labels, ids) are ignored, so a task's whole feature dict can be
passed. There is no pooler: heads read the long and global outputs.
"""

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf
import tf_keras

from etc_realformer.attention import dropout as dropout_lib
from etc_realformer.attention.masks import prepare_side_inputs
from etc_realformer.attention.streams import NO_STREAMS
from etc_realformer.attention.streams import Streams
from etc_realformer.config import EtcConfig, PATTERNS
from etc_realformer.execution import ExecutionConfig
from etc_realformer.features.relative_positions import distance_vocab_size
from etc_realformer.features.relative_positions import own_sentence_id
from etc_realformer.features.side_inputs import SIDE_INPUT_KEYS
from etc_realformer.layers.embedding import EtcEmbeddings
from etc_realformer.networks.transformer_block import GlobalLocalTransformerBlock

# Variables the original writes at the checkpoint's root, not under the
# encoder's scope (`etc_document_bert/`).
ROOT_LEVEL_TABLES = ("position_emb_lookup_long/",
                     "position_emb_lookup_global/")

# EtcConfig fields the layers take under the same names.
_ATTENTION_FIELDS = (
    "hidden_size", "num_attention_heads", "local_radius",
    "relative_vocab_size", "attention_probs_dropout_prob",
    "share_kv_projections", "share_qkv_projections",
    "share_att_output_projection", "residual_running_mean",
    "value_output_identity_init", "query_key_identity_init")
_BLOCK_FIELDS = ("hidden_size", "intermediate_size", "hidden_act",
                 "hidden_dropout_prob", "share_feed_forward_params",
                 "use_pre_activation_order")


class EncoderOutput(NamedTuple):
  """Everything `EtcModel.encode` computes.

  Attributes:
    long_output, global_output: <T>[B, L, hidden], <T>[B, G, hidden].
    embedding_long, embedding_global: the embeddings after their LayerNorm,
      before dropout.
    layer_outputs: with `return_layer_outputs`, (long, global) after each
      layer; else None.
    attention_probs: with `return_attention_probs`, per layer a dict
      pattern -> probabilities (see `EtcModel.call`); else None.
  """
  long_output: tf.Tensor
  global_output: tf.Tensor
  embedding_long: tf.Tensor
  embedding_global: tf.Tensor
  layer_outputs: Optional[List[Tuple[tf.Tensor, tf.Tensor]]] = None
  attention_probs: Optional[List[Dict[str, tf.Tensor]]] = None


def global_relative_initial_biases(config: EtcConfig, layer_index: int
                                   ) -> Dict[int, List[float]]:
  """{relative id: initial bias per head} of a layer's global queries.

  `own_sentence_bias_init` on the own-sentence id of every head;
  `count_head_bias_init` b makes the last head of the last layer a counter
  (+b on itself, -b on the other global tokens, 0 on its own sentence).
  Empty when neither applies.
  """
  heads = config.num_attention_heads
  own = [config.own_sentence_bias_init] * heads
  biases = {}
  b = config.count_head_bias_init
  # The last layer only: its global outputs are the summaries and feed no
  # long token, so the count does not reach the MLM predictions.
  if b and layer_index == config.num_hidden_layers - 1:
    own[-1] = 0.0
    distances = distance_vocab_size(config.relative_pos_max_distance)
    biases[0] = [0.0] * (heads - 1) + [b]
    for rel_id in range(1, distances):
      biases[rel_id] = [0.0] * (heads - 1) + [-b]
  if any(own):
    biases[own_sentence_id(config.relative_pos_max_distance)] = own
  return biases


class EtcModel(tf_keras.layers.Layer):
  """The ETC encoder, with RealFormer residual attention per pattern.

  All weights exist after `build()` (or the first call), named so that
  `etc_realformer.checkpoints.official` maps them one-to-one onto the
  released TF1 checkpoints.
  """

  def __init__(self, config: EtcConfig,
               execution: Optional[ExecutionConfig] = None,
               name: str = "etc_document_bert", **kwargs):
    """Args:
      config: the model.
      execution: how to compute it (default `ExecutionConfig()`).
      name: the checkpoints' root scope.
    """
    super().__init__(name=name, **kwargs)
    config.validate()
    self.config = config
    self.execution = execution or ExecutionConfig()
    init = tf_keras.initializers.TruncatedNormal(
        stddev=config.initializer_range)
    self.embeddings = EtcEmbeddings(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        segment_vocab_size=config.segment_vocab_size, initializer=init,
        embedding_size=config.embedding_size,
        max_absolute_position_embeddings=(
            config.max_absolute_position_embeddings),
        max_sentence_length_embeddings=config.max_sentence_length_embeddings,
        name="embeddings")
    attention_cfg = {f: getattr(config, f) for f in _ATTENTION_FIELDS}
    attention_cfg.update(
        size_per_head=config.size_per_head, execution=self.execution,
        residual_patterns=(tuple(config.residual_patterns)
                           if config.residual_attention else ()))
    self.blocks = [
        GlobalLocalTransformerBlock(
            index=i, initializer=init, name=f"layer_{i}",
            attention_cfg=dict(
                attention_cfg, global_relative_initial_biases=(
                    global_relative_initial_biases(config, i))),
            **{f: getattr(config, f) for f in _BLOCK_FIELDS})
        for i in range(config.num_hidden_layers)]

  def build(self, input_shape=None):
    self.embeddings.build()
    for block in self.blocks:
      block.build()
    super().build(input_shape)

  # ----------------------------------------------------------------- checks
  def _check_inputs(self, features: Mapping[str, Any]) -> Dict[str, tf.Tensor]:
    cfg = self.config
    for key in ("token_ids", "global_token_ids"):
      if key not in features or features[key] is None:
        raise ValueError(f"EtcModel inputs: missing required key {key!r}")
    out = {}
    for key, value in features.items():
      if value is None or key not in _ALL_KEYS:
        continue
      out[key] = tf.convert_to_tensor(value)

    def shape_of(key):
      return out[key].shape

    long_shape, global_shape = shape_of("token_ids"), shape_of(
        "global_token_ids")
    for key, shape in (("token_ids", long_shape),
                       ("global_token_ids", global_shape)):
      if shape.rank != 2:
        raise ValueError(f"{key}: expected rank 2 [batch, length], got shape "
                         f"{shape}")
    batch, long_len = long_shape[0], long_shape[1]
    global_len = global_shape[1]
    window = 2 * cfg.local_radius + 1
    expected = {
        "segment_ids": [batch, long_len],
        "position_ids": [batch, long_len],
        "global_segment_ids": [batch, global_len],
        "global_position_ids": [batch, global_len],
        "l2l_att_mask": [batch, long_len, window],
        "l2l_relative_att_ids": [batch, long_len, window],
        "g2g_att_mask": [batch, global_len, global_len],
        "g2g_relative_att_ids": [batch, global_len, global_len],
        "l2g_att_mask": [batch, long_len, global_len],
        "l2g_relative_att_ids": [batch, long_len, global_len],
        "g2l_att_mask": [batch, global_len, long_len],
        "g2l_relative_att_ids": [batch, global_len, long_len],
        "long_embedding_adder": [batch, long_len, cfg.hidden_size],
        "global_embedding_adder": [batch, global_len, cfg.hidden_size],
    }
    expected["global_token_ids"] = [batch, global_len]
    for key, dims in expected.items():
      if key not in out:
        continue
      shape = out[key].shape
      if shape.rank != len(dims) or not tf.TensorShape(dims).is_compatible_with(
          shape):
        raise ValueError(
            f"{key}: expected shape {_fmt(dims)} (B={batch}, L={long_len}, "
            f"G={global_len}, 2r+1={window}), got {shape}")
    if any(k in out for k in ("l2l_relative_att_ids", "l2g_relative_att_ids",
                              "g2g_relative_att_ids", "g2l_relative_att_ids")
           ) and cfg.relative_vocab_size is None:
      raise ValueError("relative ids given but the config has "
                       "relative_vocab_size null")
    if tf.executing_eagerly():
      self._check_values(out)
    return out

  def _check_values(self, out: Dict[str, tf.Tensor]) -> None:
    """Range checks on concrete (eager) inputs; skipped inside graphs."""
    cfg = self.config
    limits = {"token_ids": cfg.vocab_size, "global_token_ids": cfg.vocab_size,
              "segment_ids": cfg.segment_vocab_size,
              "global_segment_ids": cfg.segment_vocab_size}
    if cfg.max_absolute_position_embeddings:
      limits["position_ids"] = cfg.max_absolute_position_embeddings
      limits["global_position_ids"] = cfg.max_absolute_position_embeddings
    if cfg.relative_vocab_size is not None:
      for p in PATTERNS:
        limits[f"{p}_relative_att_ids"] = cfg.relative_vocab_size
    for key, limit in limits.items():
      if key in out and tf.size(out[key]) > 0:
        values = out[key].numpy()
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= limit:
          raise ValueError(f"{key}: values must lie in [0, {limit}), found "
                           f"range [{low}, {high}]")
    for p in PATTERNS:
      key = f"{p}_att_mask"
      if key in out and tf.size(out[key]) > 0:
        values = out[key].numpy()
        if not np.isin(values, (0, 1)).all():
          raise ValueError(f"{key}: a mask holds only 0 and 1")

  # ------------------------------------------------------------------- call
  # Plain TensorFlow, no Python control flow on tensors: traced without
  # AutoGraph's source conversion (of this and every layer it calls), a
  # tf.function traces in about half the time.
  @tf.autograph.experimental.do_not_convert
  def call(self, features: Mapping[str, Any], training: Optional[bool] = None,
           return_attention_probs: bool = False,
           att_implementation: Optional[str] = None):
    """Encodes a batch.

    Args:
      features: see the module docstring.
      training: dropout on (Python bool; None means False).
      return_attention_probs: also return, per layer, a dict pattern ->
        <float32> probabilities (l2l [B, H, L, 2r+1], l2g [B, H, L, G],
        g2g [B, H, G, G], g2l [B, H, G, L]). Off by default and free when off.
      att_implementation: 'auto' | 'sparse' | 'full', overriding
        `ExecutionConfig.att_implementation`.

    Returns:
      (long_output <T>[B, L, hidden], global_output <T>[B, G, hidden]) and,
      with `return_attention_probs`, a third element: a list (one per layer)
      of probability dicts. T is the layer's compute dtype.
    """
    out = self.encode(features, training=training,
                      return_attention_probs=return_attention_probs,
                      att_implementation=att_implementation)
    if return_attention_probs:
      return out.long_output, out.global_output, out.attention_probs
    return out.long_output, out.global_output

  def encode(self, features: Mapping[str, Any],
             training: Optional[bool] = None,
             return_attention_probs: bool = False,
             return_layer_outputs: bool = False,
             att_implementation: Optional[str] = None) -> "EncoderOutput":
    """`call` with everything it can return (see `EncoderOutput`).

    Args:
      return_layer_outputs: keep every layer's outputs (gradient
        checkpointing then recomputes nothing: they are kept anyway).
      (others as `call`.)
    """
    cfg = self.config
    training = bool(training) if training is not None else False
    inputs = self._check_inputs(features)
    token_ids = inputs["token_ids"]
    long_len = token_ids.shape[1]
    global_len = inputs["global_token_ids"].shape[1]
    impl = self.execution.implementation_for(long_len, att_implementation)
    if long_len is None:
      if impl == "full":
        raise ValueError("att_implementation 'full' needs a static long "
                         "length")
      long_len = tf.shape(token_ids)[1]
    if global_len is None:
      global_len = tf.shape(inputs["global_token_ids"])[1]

    seed = None
    if training and (cfg.hidden_dropout_prob or
                     cfg.attention_probs_dropout_prob):
      seed = dropout_lib.new_call_seed()

    embedding_long, embedding_global = self.embeddings(
        inputs["token_ids"], inputs["global_token_ids"],
        segment_ids=inputs.get("segment_ids"),
        global_segment_ids=inputs.get("global_segment_ids"),
        position_ids=inputs.get("position_ids"),
        global_position_ids=inputs.get("global_position_ids"),
        long_embedding_adder=inputs.get("long_embedding_adder"),
        global_embedding_adder=inputs.get("global_embedding_adder"),
        global_sentence_lengths=(self._sentence_lengths(inputs)
                                 if cfg.max_sentence_length_embeddings
                                 else None))
    long_x = dropout_lib.stateless_dropout(
        embedding_long, cfg.hidden_dropout_prob, seed,
        dropout_lib.SITE_EMBEDDING_LONG, training,
        rng=self.execution.dropout_rng)
    global_x = dropout_lib.stateless_dropout(
        embedding_global, cfg.hidden_dropout_prob, seed,
        dropout_lib.SITE_EMBEDDING_GLOBAL, training,
        rng=self.execution.dropout_rng)

    side = prepare_side_inputs(
        {k: inputs.get(k) for k in SIDE_INPUT_KEYS},
        batch_size=tf.shape(token_ids)[0], long_len=long_len,
        global_len=global_len, local_radius=cfg.local_radius,
        sparse=impl == "sparse")

    all_probs: List[Dict[str, tf.Tensor]] = []
    layer_outputs: List[Tuple[tf.Tensor, tf.Tensor]] = []
    streams: Streams = NO_STREAMS
    period = cfg.grad_checkpointing_period
    num_layers = len(self.blocks)
    start = 0
    while start < num_layers:
      end = min(start + period, num_layers) if period else num_layers
      chunk = self.blocks[start:end]
      # Every chunk but the last is recomputed in the backward pass; probs
      # and layer outputs are analysis outputs, so then nothing recomputes.
      recompute = (period and end < num_layers and
                   not return_attention_probs and not return_layer_outputs)
      if recompute:
        long_x, global_x, streams = _recomputed_chunk(
            chunk, long_x, global_x, streams, side, training, seed)
      else:
        for block in chunk:
          # The last layer's streams are never read: not built.
          long_x, global_x, streams, probs = block(
              long_x, global_x, side, streams=streams, training=training,
              seed=seed, return_probs=return_attention_probs,
              emit_streams=block is not self.blocks[-1])
          if return_attention_probs:
            all_probs.append(probs)
          if return_layer_outputs:
            layer_outputs.append((long_x, global_x))
      start = end

    return EncoderOutput(
        long_output=long_x, global_output=global_x,
        embedding_long=embedding_long, embedding_global=embedding_global,
        layer_outputs=layer_outputs if return_layer_outputs else None,
        attention_probs=all_probs if return_attention_probs else None)

  def _sentence_lengths(self, inputs: Mapping[str, tf.Tensor]) -> tf.Tensor:
    """<int32>[B, G]: per global token, the long tokens it may attend to
    that carry its own-sentence id (padding excluded by the mask)."""
    for key in ("g2l_relative_att_ids", "g2l_att_mask"):
      if key not in inputs:
        raise ValueError(f"EtcModel inputs: max_sentence_length_embeddings "
                         f"needs {key!r}")
    own = own_sentence_id(self.config.relative_pos_max_distance)
    member = tf.equal(tf.cast(inputs["g2l_relative_att_ids"], tf.int32), own)
    member &= tf.not_equal(tf.cast(inputs["g2l_att_mask"], tf.int32), 0)
    return tf.reduce_sum(tf.cast(member, tf.int32), axis=-1)

  # ------------------------------------------------------------ checkpoints
  def official_variables(self) -> Dict[str, tf.Variable]:
    """Every variable by its name in a released ETC checkpoint."""
    if not self.built:
      self.build()
    root = self.name
    # The original creates the absolute position tables outside its encoder
    # scope, at the checkpoint's root.
    out = {(k if k.startswith(ROOT_LEVEL_TABLES) else f"{root}/{k}"): v
           for k, v in self.embeddings.official_variables().items()}
    for block in self.blocks:
      for k, v in block.official_variables().items():
        out[f"{root}/global_local_transformer_layers/{k}"] = v
    return out


def _recomputed_chunk(chunk, long_x, global_x, streams, side, training, seed):
  """Runs `chunk` under `tf.recompute_grad` (activations not kept).

  Dropout inside is seeded by `seed` (drawn outside), so the recomputation
  sees exactly the forward pass's masks.
  """
  # Streams (`attention.streams`, either form) are tf.nest structures of
  # tensors; they cross the recomputed function flat.
  in_structure = streams
  out_structure = []

  # The backward pass traces `run` again, outside the model's call: keep
  # AutoGraph off there too (see `call`).
  @tf.recompute_grad
  @tf.autograph.experimental.do_not_convert
  def run(long_in, global_in, *stream_values):
    current = tf.nest.pack_sequence_as(in_structure, list(stream_values))
    lx, gx = long_in, global_in
    for block in chunk:
      lx, gx, current, _ = block(lx, gx, side, streams=current,
                                 training=training, seed=seed)
    if not out_structure:
      out_structure.append(current)
    return (lx, gx) + tuple(tf.nest.flatten(current))

  outputs = run(long_x, global_x, *tf.nest.flatten(streams))
  long_x, global_x = outputs[0], outputs[1]
  return long_x, global_x, tf.nest.pack_sequence_as(out_structure[0],
                                                    list(outputs[2:]))


_ALL_KEYS = frozenset(("token_ids", "global_token_ids", "segment_ids",
                       "global_segment_ids", "position_ids",
                       "global_position_ids", "long_embedding_adder",
                       "global_embedding_adder") + SIDE_INPUT_KEYS)


def _fmt(dims) -> str:
  return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
