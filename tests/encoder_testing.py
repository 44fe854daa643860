"""Helpers for the encoder tests: tiny configs and models, random inputs,
training-step comparisons, and an independent NumPy reference of the
ETC-RealFormer forward pass.

The NumPy reference is written from the definitions of the ETC paper
(global-local attention with relative position terms, Post-LN layers) and
the RealFormer paper (the running sum of the scaled scores before the mask;
its running mean), densely, over the concatenation [long keys
(band-masked), global keys], so it shares no code or layout trick with the
library.
"""

import dataclasses
import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from etc_realformer import EtcConfig, EtcModel, ExecutionConfig

PATTERNS = ("l2l", "l2g", "g2g", "g2l")
_EXECUTION_FIELDS = {f.name for f in dataclasses.fields(ExecutionConfig)}


def split_changes(changes: Dict[str, Any]
                  ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
  """(EtcConfig fields, ExecutionConfig fields) of a dict of overrides."""
  model = {k: v for k, v in changes.items() if k not in _EXECUTION_FIELDS}
  execution = {k: v for k, v in changes.items() if k in _EXECUTION_FIELDS}
  return model, execution


def tiny_model(config: Optional[EtcConfig] = None, **changes) -> EtcModel:
  """A built `EtcModel` of `config` (default `tiny_config()`) with `changes`
  to its EtcConfig and ExecutionConfig fields."""
  model_changes, execution = split_changes(changes)
  config = (config or tiny_config()).replace(**model_changes)
  model = EtcModel(config, ExecutionConfig(**execution))
  model.build()
  return model


def copy_weights(source: EtcModel, target: EtcModel) -> EtcModel:
  """Assigns `source`'s weights to `target` (by released name; a shallower
  target takes the first layers)."""
  targets = target.official_variables()
  for name, var in source.official_variables().items():
    if name in targets:
      targets[name].assign(var)
  return target


def twin_models(config: EtcConfig, **changes) -> Tuple[EtcModel, EtcModel]:
  """Two models with the same weights: `config`, and `config` + `changes`
  (EtcConfig or ExecutionConfig fields)."""
  a = tiny_model(config)
  randomize_relative_bias(a)
  return a, copy_weights(a, tiny_model(config, **changes))


def probes(config: EtcConfig, batch: int, long_len: int, global_len: int,
           seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
  """Random weights of the outputs in a scalar test loss."""
  rng = np.random.RandomState(seed)
  return (rng.normal(size=[batch, long_len, config.hidden_size]).astype(
      np.float32),
          rng.normal(size=[batch, global_len, config.hidden_size]).astype(
              np.float32))


def loss_and_grads(model: EtcModel, feats, probe: Sequence[np.ndarray],
                   training: bool, impl: str = "sparse",
                   use_function: bool = False, jit_compile: bool = False):
  """(outputs, loss, gradients) of sum(outputs * probes), dropout seeded.

  `use_function` traces the step in a `tf.function`, `jit_compile` compiles
  it with XLA.

  Returns NumPy values; the gradients follow `model.trainable_variables`.
  """
  def step():
    tf.random.set_seed(1234)  # the per-call dropout seed is drawn from here
    with tf.GradientTape() as tape:
      outs = model(feats, training=training, att_implementation=impl)
      loss = sum(tf.reduce_sum(o * p) for o, p in zip(outs, probe))
    return outs, loss, tape.gradient(loss, model.trainable_variables)
  if use_function or jit_compile:
    step = tf.function(step, jit_compile=jit_compile)
  outs, loss, grads = step()
  return ([o.numpy() for o in outs], float(loss),
          [None if g is None else tf.convert_to_tensor(g).numpy()
           for g in grads])


def assert_same_training(a, b, relative: float = 2e-6) -> None:
  """Two `loss_and_grads` results agree to float32 rounding.

  Outputs and loss to 1e-5. Gradients of a few hundred are sums of larger
  terms that two computations (or two runs: the executor may add partial
  gradients in any order) round differently: float32 noise scales with the
  gradient's magnitude, so each gradient is judged relative to its largest
  element (`relative` x max |g|, plus 1e-5 for gradients that are noise).
  """
  outs_a, loss_a, grads_a = a
  outs_b, loss_b, grads_b = b
  for x, y in zip(outs_a, outs_b):
    assert np.isfinite(y).all()
    np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-5)
  assert abs(loss_a - loss_b) < 1e-5 * max(1.0, abs(loss_a))
  for ga, gb in zip(grads_a, grads_b):
    assert (ga is None) == (gb is None)
    if ga is not None:
      atol = 1e-5 + relative * float(np.abs(ga).max())
      np.testing.assert_allclose(ga, gb, atol=atol, rtol=1e-5)


def tiny_config(**overrides) -> EtcConfig:
  values = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=32, local_radius=2,
                relative_pos_max_distance=2, relative_vocab_size=8,
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  values.update(overrides)
  return EtcConfig(**values)


def random_features(config: EtcConfig, batch: int, long_len: int,
                    global_len: int, seed: int = 0,
                    fully_masked_rows: bool = True,
                    with_relative_ids: bool = True) -> Dict[str, np.ndarray]:
  """Random (never all-zero) ids and random 0/1 masks.

  Masks are random rather than built from breakpoints so that every code path
  sees arbitrary patterns; with `fully_masked_rows` some long and some global
  queries have every key masked, and the last batch row is half padding.
  """
  rng = np.random.RandomState(seed)
  r = config.local_radius
  window = 2 * r + 1
  feats = {
      "token_ids": rng.randint(1, config.vocab_size, [batch, long_len]),
      "global_token_ids": rng.randint(1, config.vocab_size,
                                      [batch, global_len]),
      "segment_ids": rng.randint(0, 3, [batch, long_len]),
      "global_segment_ids": rng.randint(0, 3, [batch, global_len]),
      "l2l_att_mask": (rng.rand(batch, long_len, window) < 0.8),
      "l2g_att_mask": (rng.rand(batch, long_len, global_len) < 0.8),
      "g2g_att_mask": (rng.rand(batch, global_len, global_len) < 0.8),
      "g2l_att_mask": (rng.rand(batch, global_len, long_len) < 0.8),
  }
  if fully_masked_rows:
    for key in ("l2l_att_mask", "l2g_att_mask"):
      feats[key][0, 1] = False
      feats[key][-1, long_len // 2:] = False
    for key in ("g2g_att_mask", "g2l_att_mask"):
      feats[key][0, 0] = False
      feats[key][-1, global_len // 2:] = False
  if with_relative_ids and config.relative_vocab_size:
    vocab = config.relative_vocab_size
    feats["l2l_relative_att_ids"] = rng.randint(0, vocab,
                                                [batch, long_len, window])
    feats["l2g_relative_att_ids"] = rng.randint(0, vocab,
                                                [batch, long_len, global_len])
    feats["g2g_relative_att_ids"] = rng.randint(
        0, vocab, [batch, global_len, global_len])
    feats["g2l_relative_att_ids"] = rng.randint(
        0, vocab, [batch, global_len, long_len])
  return {k: v.astype(np.int32) for k, v in feats.items()}


# ----------------------------------------------------------- NumPy reference
def _layer_norm(x, gamma, beta, eps=1e-12):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _gelu(x):
  return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                (x + 0.044715 * x ** 3)))


def _band_to_dense(window: np.ndarray, r: int) -> np.ndarray:
  """[B, L, 2r+1] -> [B, L, L]; outside the band and the sequence: 0."""
  b, l, _ = window.shape
  dense = np.zeros([b, l, l], window.dtype)
  for i in range(l):
    for j in range(2 * r + 1):
      k = i - r + j
      if 0 <= k < l:
        dense[:, i, k] = window[:, i, j]
  return dense


def numpy_reference(weights: Dict[str, np.ndarray], config: EtcConfig,
                    feats: Dict[str, np.ndarray],
                    return_probs: bool = False):
  """The ETC-RealFormer forward pass (inference) in float64 NumPy.

  Args:
    weights: official variable name (under `etc_document_bert/`) -> value.
    config: the model config (Post-LN, shared qkv and ffn as the defaults).
    feats: token ids, segment ids and the eight side inputs.

  Returns:
    (long_output [B, L, H], global_output [B, G, H]).
  """
  assert config.share_qkv_projections and config.share_feed_forward_params
  assert not config.use_pre_activation_order
  w = {k.split("/", 1)[1]: v.astype(np.float64) for k, v in weights.items()}
  r = config.local_radius
  heads, d = config.num_attention_heads, config.size_per_head
  table = w["token_emb_lookup/embedding_table"]
  seg = w["segment_emb_lookup/embedding_table"]
  x_long = table[feats["token_ids"]] + seg[feats["segment_ids"]]
  x_glob = table[feats["global_token_ids"]] + seg[feats["global_segment_ids"]]
  if config.max_sentence_length_embeddings:
    # A global token's length: the visible long tokens of its own sentence.
    own = 2 * config.relative_pos_max_distance + 2
    lengths = ((feats["g2l_relative_att_ids"] == own) &
               (feats["g2l_att_mask"] != 0)).sum(-1)
    x_glob = x_glob + w["sentence_length_emb_lookup/embedding_table"][
        np.minimum(lengths, config.max_sentence_length_embeddings - 1)]
  x_long = _layer_norm(x_long, w["long_emb_layer_norm/gamma"],
                       w["long_emb_layer_norm/beta"])
  x_glob = _layer_norm(x_glob, w["global_emb_layer_norm/gamma"],
                       w["global_emb_layer_norm/beta"])
  batch, long_len, _ = x_long.shape

  masks = {
      "l2l": _band_to_dense(feats["l2l_att_mask"], r),
      "l2g": feats["l2g_att_mask"], "g2g": feats["g2g_att_mask"],
      "g2l": feats["g2l_att_mask"]}
  ids = {
      "l2l": _band_to_dense(feats["l2l_relative_att_ids"], r),
      "l2g": feats["l2g_relative_att_ids"],
      "g2g": feats["g2g_relative_att_ids"],
      "g2l": feats["g2l_relative_att_ids"]}
  carried = set(config.residual_patterns) if config.residual_attention else set()
  streams = {}
  all_probs = []
  for layer in range(config.num_hidden_layers):
    a = (f"global_local_transformer_layers/fused_att_layer_{layer}/"
         "fused_global_local_att/")

    def proj(x, name):
      y = x @ w[a + name + "/linear/kernel"] + w[a + name + "/linear/bias"]
      return y.reshape(y.shape[0], y.shape[1], heads, d)

    q = {"long": proj(x_long, "long_query_projection"),
         "global": proj(x_glob, "long_query_projection")}
    k = {"long": proj(x_long, "l2l_key_projection"),
         "global": proj(x_glob, "l2l_key_projection")}
    v = {"long": proj(x_long, "l2l_value_projection"),
         "global": proj(x_glob, "l2l_value_projection")}
    rel = {
        "long": (w[a + "long_qkv_attention/qkv_relative_attention/"
                   "relative_emb_table"],
                 w[a + "long_qkv_attention/qkv_relative_attention/"
                   "relative_bias_table"]),
        "global": (w[a + "global_qkv_attention/relative_emb_table"],
                   w[a + "global_qkv_attention/relative_bias_table"])}
    sides = {"l2l": ("long", "long"), "l2g": ("long", "global"),
             "g2g": ("global", "global"), "g2l": ("global", "long")}
    logits = {}
    for p, (qs, ks) in sides.items():
      emb, bias = rel[qs]
      content = np.einsum("bqhd,bkhd->bhqk", q[qs], k[ks])
      per_id = np.einsum("bqhd,rhd->bqrh", q[qs], emb) + bias  # [B,Q,R,H]
      picked = np.take_along_axis(per_id, ids[p][..., np.newaxis], axis=2)
      # picked: [B, Q, K, H]
      score = (content + picked.transpose(0, 3, 1, 2)) / math.sqrt(d)
      if p in carried:
        score = score + streams.get(p, 0.0)
        streams[p] = score
        if config.residual_running_mean:
          score = score / (layer + 1)
      logits[p] = score + -10000.0 * (1.0 - masks[p][:, np.newaxis])
    outputs = {}
    probs_layer = {}
    for qs, (pa, pb) in (("long", ("l2l", "l2g")),
                         ("global", ("g2g", "g2l"))):
      joint = np.concatenate([logits[pa], logits[pb]], -1)
      joint_mask = np.concatenate([masks[pa], masks[pb]], -1)
      probs = np.exp(joint - joint.max(-1, keepdims=True))
      probs /= probs.sum(-1, keepdims=True)
      # Fully masked query rows attend to nothing.
      probs *= (joint_mask.max(-1) > 0)[:, np.newaxis, :, np.newaxis]
      split = logits[pa].shape[-1]
      probs_layer[pa], probs_layer[pb] = probs[..., :split], probs[..., split:]
      ctx = (np.einsum("bhqk,bkhd->bqhd", probs[..., :split], v[sides[pa][1]])
             + np.einsum("bhqk,bkhd->bqhd", probs[..., split:],
                         v[sides[pb][1]]))
      ctx = ctx.reshape(ctx.shape[0], ctx.shape[1], heads * d)
      out_name = "long_output_projection" if qs == "long" else (
          "global_output_projection")
      outputs[qs] = ctx @ w[a + out_name + "/kernel"] + w[a + out_name +
                                                          "/bias"]
    all_probs.append(probs_layer)
    pfx = f"global_local_transformer_layers/fused_att_layer_{layer}/"
    x_long = _layer_norm(x_long + outputs["long"], w[pfx + "layer_norm_0/gamma"],
                         w[pfx + "layer_norm_0/beta"])
    x_glob = _layer_norm(x_glob + outputs["global"],
                         w[pfx + "layer_norm_1/gamma"],
                         w[pfx + "layer_norm_1/beta"])
    f = f"global_local_transformer_layers/feed_forward_layer_{layer}/"

    def ffn(x):
      h = _gelu(x @ w[f + "dense_layers/layer_0/kernel"] +
                w[f + "dense_layers/layer_0/bias"])
      h = h @ w[f + "dense_layers/layer_1/kernel"] + w[
          f + "dense_layers/layer_1/bias"]
      return _layer_norm(x + h, w[f + "layer_norm/gamma"],
                         w[f + "layer_norm/beta"])

    x_long, x_glob = ffn(x_long), ffn(x_glob)
  if return_probs:
    return x_long, x_glob, all_probs
  return x_long, x_glob


def model_weights(model) -> Dict[str, np.ndarray]:
  return {k: v.numpy() for k, v in model.official_variables().items()}


def randomize_relative_bias(model, seed: int = 0, scale: float = 0.5) -> None:
  """Bias tables start at zero; give them values so tests exercise them."""
  rng = np.random.RandomState(seed)
  for name, var in model.official_variables().items():
    if name.endswith("relative_bias_table"):
      var.assign(rng.normal(0, scale, var.shape).astype(np.float32))


def max_abs_diff(a, b, mask: Optional[np.ndarray] = None) -> float:
  diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
  if mask is not None:
    diff = diff[mask]
  return float(diff.max()) if diff.size else 0.0
