"""One ETC(-RealFormer) layer: fused global-local attention + feed-forward.

Residual order as the original: Post-LN by default,
  x = LN(x + dropout(f(x)));
Pre-LN (`use_pre_activation_order`),
  x = x + dropout(f(LN(x))).
With `share_feed_forward_params` the long and global sides share the
feed-forward weights and its LayerNorm (separate dropout masks).
"""

from typing import Dict, Mapping, Optional, Tuple

import tensorflow as tf
import tf_keras

from etc_realformer.config import EtcConfig
from etc_realformer.features.relative_positions import own_sentence_id
from etc_realformer.kernels import bias_gelu as bias_gelu_kernel
from etc_realformer.kernels import build as kernel_build
from etc_realformer.kernels import residual_norm as residual_norm_kernel
from etc_realformer.layers.attention import FusedGlobalLocalAttention
from etc_realformer.layers.attention import PreparedSideInputs
from etc_realformer.layers.dropout import fold_seed
from etc_realformer.layers.dropout import keep_gain
from etc_realformer.layers.dropout import keep_threshold
from etc_realformer.layers.dropout import stateless_dropout
from etc_realformer.layers.embedding import layer_norm
from etc_realformer.layers.feed_forward import FeedForward

# Dropout sites per layer (attention uses 4, one per pattern).
SITES_PER_LAYER = 16
_SITE_ATT_LONG, _SITE_ATT_GLOBAL, _SITE_FF_LONG, _SITE_FF_GLOBAL = 4, 5, 6, 7


_GELU_C = 0.7978845608028654  # sqrt(2 / pi)
_GELU_A = 0.044715


def _gelu_derivative(x: tf.Tensor) -> tf.Tensor:
  xf = tf.cast(x, tf.float32)
  t = tf.tanh(_GELU_C * (xf + _GELU_A * xf * xf * xf))
  return 0.5 * (1.0 + t) + 0.5 * xf * (1.0 - t * t) * _GELU_C * (
      1.0 + 3.0 * _GELU_A * xf * xf)


# Fused by XLA into one pass over [N, intermediate]: unfused, the derivative's
# dozen element-wise ops leave up to three more [N, intermediate] temporaries
# alive at once, at the point of the backward pass where memory peaks.
@tf.function(jit_compile=True)
def _gelu_backward(x: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
  return tf.cast(_gelu_derivative(x), dy.dtype) * dy


@tf.custom_gradient
def lean_gelu(x: tf.Tensor) -> tf.Tensor:
  """`tf.nn.gelu(x, approximate=True)` that keeps only `x` for its gradient.

  The plain op leaves four more [N, intermediate] tensors (x^3, the tanh
  argument, the tanh, ...) alive until the backward pass, 0.4 GB per layer
  at L = 8192 in float32; here the backward pass recomputes the tanh from x.
  Same forward values (the same op); the gradient is the analytic one.
  """
  y = tf.nn.gelu(x, approximate=True)

  def grad(dy):
    return _gelu_backward(x, dy)

  return y, grad


class GlobalLocalTransformerBlock(tf_keras.layers.Layer):
  """Layer `index` of the encoder."""

  def __init__(self, config: EtcConfig, index: int, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.index = index
    self.site = (index + 1) * SITES_PER_LAYER
    init = tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range)
    self.attention = FusedGlobalLocalAttention(
        hidden_size=config.hidden_size,
        num_heads=config.num_attention_heads,
        size_per_head=config.size_per_head,
        local_radius=config.local_radius,
        relative_vocab_size=config.relative_vocab_size,
        att_dropout_prob=config.attention_probs_dropout_prob,
        initializer=init,
        share_kv_projections=config.share_kv_projections,
        share_qkv_projections=config.share_qkv_projections,
        share_att_output_projection=config.share_att_output_projection,
        dropout_site=self.site,
        global_relative_initial_biases=(
            {own_sentence_id(config.relative_pos_max_distance):
             config.own_sentence_bias_init}
            if config.own_sentence_bias_init else None),
        value_output_identity_init=config.value_output_identity_init,
        query_key_identity_init=config.query_key_identity_init,
        name="fused_global_local_att")
    self.long_att_norm = layer_norm("layer_norm_0")
    self.global_att_norm = layer_norm("layer_norm_1")

    def ff(name):
      return FeedForward(config.hidden_size, config.intermediate_size,
                         config.hidden_act, init, name=name)

    if config.share_feed_forward_params:
      self.long_ff = self.global_ff = ff("feed_forward")
      self.long_ff_norm = self.global_ff_norm = layer_norm("layer_norm")
    else:
      self.long_ff, self.global_ff = ff("long_feed_forward"), ff(
          "global_feed_forward")
      self.long_ff_norm = layer_norm("long_ff_layer_norm")
      self.global_ff_norm = layer_norm("global_ff_layer_norm")

  def build(self, input_shape=None):
    hidden = tf.TensorShape([None, None, self.config.hidden_size])
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
           side: PreparedSideInputs,
           streams: Optional[Mapping[str, tf.Tensor]] = None,
           training: bool = False, seed: Optional[tf.Tensor] = None,
           return_probs: bool = False, emit_streams: bool = True):
    """<T>[B, L, hidden], <T>[B, G, hidden] -> same, new streams, probs.

    `emit_streams=False` (the last layer) returns no new streams.
    """
    cfg = self.config
    carried = tuple(p for p in cfg.residual_patterns
                    if cfg.residual_attention)
    drop = cfg.hidden_dropout_prob

    def dropout(x, site):
      return stateless_dropout(x, drop, seed, self.site + site, training)

    pre_ln = cfg.use_pre_activation_order
    att_long_in = self.long_att_norm(long_x) if pre_ln else long_x
    att_global_in = self.global_att_norm(global_x) if pre_ln else global_x
    att_long, att_global, streams, probs = self.attention(
        att_long_in, att_global_in, side, streams=streams, carried=carried,
        num_summed=self.index + 1, running_mean=cfg.residual_running_mean,
        training=training, seed=seed, return_probs=return_probs,
        recompute=cfg.recompute_attention and training,
        chunk_len=cfg.chunk_len_for(side.long_len), emit_streams=emit_streams,
        stream_sources=cfg.recompute_residual_streams,
        fused_kernel=cfg.fused_attention_kernel)
    # The fused CPU kernels (post-LN only): the residual add, its dropout
    # and the LayerNorm in one pass, the feed-forward's bias and gelu in
    # another; the same function as the TF ops below (and their dropout
    # masks). They take the activations in their [B, N, width] layout.
    fused = (not pre_ln and
             kernel_build.use_fused_kernel(cfg.fused_attention_kernel))

    def close(norm, residual, branch, site):
      """Post-LN: norm(residual + dropout(branch)), <T>[B, N, hidden]."""
      if not fused:
        return norm(residual + dropout(branch, site))
      use_drop = training and drop > 0.0
      return residual_norm_kernel.residual_norm(
          tf.cast(branch, norm.compute_dtype),
          tf.cast(residual, norm.compute_dtype), norm.gamma,
          norm.beta, epsilon=norm.epsilon,
          key=fold_seed(seed, self.site + site) if use_drop else None,
          threshold=keep_threshold(drop) if use_drop else 0,
          gain=keep_gain(drop, training), save_sum=training)

    if pre_ln:
      long_x = long_x + dropout(att_long, _SITE_ATT_LONG)
      global_x = global_x + dropout(att_global, _SITE_ATT_GLOBAL)
    else:
      long_x = close(self.long_att_norm, long_x, att_long, _SITE_ATT_LONG)
      global_x = close(self.global_att_norm, global_x, att_global,
                       _SITE_ATT_GLOBAL)

    def feed_forward(ff, x):
      if cfg.hidden_act != "gelu":
        return ff(x)
      if fused:
        return ff.layer_1(bias_gelu_kernel.bias_gelu(
            ff.layer_0.matmul(x), ff.layer_0.bias))
      # Same weights and function as `ff(x)`; only the gelu keeps less.
      return ff.layer_1(lean_gelu(ff.layer_0(x)))

    def ff_block(x, ff, norm, site):
      if pre_ln:
        return x + dropout(feed_forward(ff, norm(x)), site)
      return close(norm, x, feed_forward(ff, x), site)

    long_x = ff_block(long_x, self.long_ff, self.long_ff_norm, _SITE_FF_LONG)
    global_x = ff_block(global_x, self.global_ff, self.global_ff_norm,
                        _SITE_FF_GLOBAL)
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
    if self.config.share_feed_forward_params:
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
