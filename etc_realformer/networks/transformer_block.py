"""One ETC(-RealFormer) layer: fused global-local attention + feed-forward.

Residual order as the original: Post-LN by default,
  x = LN(x + dropout(f(x)));
Pre-LN (`use_pre_activation_order`),
  x = x + dropout(f(LN(x))).
With `share_feed_forward_params` the long and global branches share the
feed-forward weights and its LayerNorm (separate dropout masks).
"""

from typing import Any, Dict, Mapping, Optional

import tensorflow as tf
import tf_keras

from etc_realformer.attention import dropout as dropout_lib
from etc_realformer.attention.layer import FusedGlobalLocalAttention
from etc_realformer.attention.masks import PreparedSideInputs
from etc_realformer.attention.streams import NO_STREAMS
from etc_realformer.attention.streams import Streams
from etc_realformer.layers.feed_forward import FeedForward
from etc_realformer.layers.normalization import layer_norm


class GlobalLocalTransformerBlock(tf_keras.layers.Layer):
  """Layer `index` of the encoder: <T>[B, L, hidden], <T>[B, G, hidden] ->
  the same shapes."""

  def __init__(self,
               index: int,
               attention_cfg: Mapping[str, Any],
               hidden_size: int,
               intermediate_size: int,
               initializer,
               hidden_act: str = "gelu",
               hidden_dropout_prob: float = 0.1,
               share_feed_forward_params: bool = True,
               use_pre_activation_order: bool = False,
               **kwargs):
    """Args are the `EtcConfig` fields of the same names, and:

    Args:
      index: the layer's index (dropout sites, RealFormer's running mean).
      attention_cfg: the `FusedGlobalLocalAttention` arguments (all but
        `layer_index`, `initializer` and `name`), shared by every layer (as
        Model Garden's `TransformerScaffold` takes its `attention_cfg`).
      initializer: of every kernel.
    """
    super().__init__(**kwargs)
    self.index = index
    self.hidden_size = hidden_size
    self.hidden_dropout_prob = hidden_dropout_prob
    self.share_feed_forward_params = share_feed_forward_params
    self.use_pre_activation_order = use_pre_activation_order
    self.site = dropout_lib.layer_sites(index)
    execution = attention_cfg.get("execution")
    self.dropout_rng = (execution.dropout_rng if execution is not None
                        else dropout_lib.PHILOX)
    self.attention = FusedGlobalLocalAttention(
        layer_index=index, initializer=initializer,
        name="fused_global_local_att", **attention_cfg)
    self.long_att_norm = layer_norm("layer_norm_0")
    self.global_att_norm = layer_norm("layer_norm_1")

    def ff(name):
      return FeedForward(hidden_size, intermediate_size, hidden_act,
                         initializer, name=name)

    if share_feed_forward_params:
      self.long_ff = self.global_ff = ff("feed_forward")
      self.long_ff_norm = self.global_ff_norm = layer_norm("layer_norm")
    else:
      self.long_ff, self.global_ff = ff("long_feed_forward"), ff(
          "global_feed_forward")
      self.long_ff_norm = layer_norm("long_ff_layer_norm")
      self.global_ff_norm = layer_norm("global_ff_layer_norm")

  def build(self, input_shape=None):
    hidden = tf.TensorShape([None, None, self.hidden_size])
    self.attention.build()
    for layer in {id(l): l for l in (
        self.long_att_norm, self.global_att_norm, self.long_ff_norm,
        self.global_ff_norm)}.values():
      layer.build(hidden)
    self.long_ff.build()
    if self.global_ff is not self.long_ff:
      self.global_ff.build()
    super().build(input_shape)

  def call(self, long_x: tf.Tensor, global_x: tf.Tensor,
           side_inputs: PreparedSideInputs,
           streams: Streams = NO_STREAMS,
           training: bool = False, seed: Optional[tf.Tensor] = None,
           return_probs: bool = False, emit_streams: bool = True):
    """<T>[B, L, hidden], <T>[B, G, hidden] -> same, new streams, probs.

    Streams and probs as `FusedGlobalLocalAttention.call`;
    `emit_streams=False` (the last layer) returns `NO_STREAMS`.
    """
    rate = self.hidden_dropout_prob

    def dropout(x, offset):
      return dropout_lib.stateless_dropout(x, rate, seed, self.site + offset,
                                           training, rng=self.dropout_rng)

    pre_ln = self.use_pre_activation_order
    att_long_in = self.long_att_norm(long_x) if pre_ln else long_x
    att_global_in = self.global_att_norm(global_x) if pre_ln else global_x
    att_long, att_global, streams, probs = self.attention(
        att_long_in, att_global_in, side_inputs, streams=streams,
        training=training, seed=seed, return_probs=return_probs,
        emit_streams=emit_streams)

    def close(x, residual, norm, offset):
      if pre_ln:
        return x + dropout(residual, offset)
      return norm(x + dropout(residual, offset))

    long_x = close(long_x, att_long, self.long_att_norm,
                   dropout_lib.ATTENTION_OUTPUT_LONG_OFFSET)
    global_x = close(global_x, att_global, self.global_att_norm,
                     dropout_lib.ATTENTION_OUTPUT_GLOBAL_OFFSET)

    def ff_block(x, ff, norm, offset):
      return close(x, ff(norm(x) if pre_ln else x), norm, offset)

    long_x = ff_block(long_x, self.long_ff, self.long_ff_norm,
                      dropout_lib.FEED_FORWARD_LONG_OFFSET)
    global_x = ff_block(global_x, self.global_ff, self.global_ff_norm,
                        dropout_lib.FEED_FORWARD_GLOBAL_OFFSET)
    return long_x, global_x, streams, probs

  def official_variables(self) -> Dict[str, tf.Variable]:
    """Variables by name under `global_local_transformer_layers/`."""
    i = self.index
    att = f"fused_att_layer_{i}"
    out = {f"{att}/fused_global_local_att/{k}": v
           for k, v in self.attention.official_variables().items()}
    for norm, name in ((self.long_att_norm, "layer_norm_0"),
                       (self.global_att_norm, "layer_norm_1")):
      out[f"{att}/{name}/gamma"] = norm.gamma
      out[f"{att}/{name}/beta"] = norm.beta
    if self.share_feed_forward_params:
      blocks = ((f"feed_forward_layer_{i}", self.long_ff, self.long_ff_norm),)
    else:
      blocks = ((f"long_feed_forward_layer_{i}", self.long_ff,
                 self.long_ff_norm),
                (f"global_feed_forward_layer_{i}", self.global_ff,
                 self.global_ff_norm))
    for prefix, ff, norm in blocks:
      for k, v in ff.official_variables().items():
        out[f"{prefix}/{k}"] = v
      out[f"{prefix}/layer_norm/gamma"] = norm.gamma
      out[f"{prefix}/layer_norm/beta"] = norm.beta
    return out
