"""One ETC layer (`etc_realformer/networks/transformer_block.py`): the
residual order (Post-LN, Pre-LN) and the feed-forward blocks against NumPy,
given the layer's own attention; dropout, streams and checkpoint names."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from etc_realformer.attention.masks import prepare_side_inputs
from etc_realformer.attention.streams import NO_STREAMS
from etc_realformer.layers.normalization import EPSILON
from etc_realformer.networks.transformer_block import GlobalLocalTransformerBlock

B, L, G, H, R = 2, 6, 2, 8, 2


def _block(hidden_dropout_prob=0.0, **kwargs):
  attention_cfg = dict(
      hidden_size=H, num_attention_heads=2, size_per_head=4, local_radius=R,
      relative_vocab_size=None, attention_probs_dropout_prob=0.0,
      residual_patterns=("l2l", "g2g"))
  block = GlobalLocalTransformerBlock(
      index=1, attention_cfg=attention_cfg, hidden_size=H,
      intermediate_size=12, hidden_act="relu",
      initializer=tf_keras.initializers.TruncatedNormal(stddev=0.3),
      hidden_dropout_prob=hidden_dropout_prob, **kwargs)
  block.build()
  # Distinct norms and biases, so that using the wrong one shows.
  rng = np.random.RandomState(0)
  for var in block.trainable_variables:
    if "gamma" in var.name or "beta" in var.name or "bias" in var.name:
      var.assign(rng.normal(0.5, 0.3, var.shape).astype(np.float32))
  return block


def _inputs():
  rng = np.random.RandomState(1)
  long_x = tf.constant(rng.normal(size=[B, L, H]), tf.float32)
  global_x = tf.constant(rng.normal(size=[B, G, H]), tf.float32)
  side = prepare_side_inputs({}, batch_size=B, long_len=L, global_len=G,
                             local_radius=R, sparse=False)
  return long_x, global_x, side


def _norm(layer, x):
  x = np.asarray(x, np.float64)
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  return ((x - mean) / np.sqrt(var + EPSILON) * layer.gamma.numpy() +
          layer.beta.numpy())


def _ff(layer, x):
  hidden = np.maximum(x @ layer.layer_0.kernel.numpy() +
                      layer.layer_0.bias.numpy(), 0.0)
  return hidden @ layer.layer_1.kernel.numpy() + layer.layer_1.bias.numpy()


def _close(actual, expected):
  np.testing.assert_allclose(actual, expected, rtol=1e-4,
                             atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("pre_ln", [False, True])
def test_residual_order_matches_numpy(pre_ln, share):
  block = _block(use_pre_activation_order=pre_ln,
                 share_feed_forward_params=share)
  assert (block.long_ff is block.global_ff) == share
  long_x, global_x, side = _inputs()
  long_out, global_out, _, _ = block(long_x, global_x, side)
  if pre_ln:
    # x + f(LN(x)) twice; the attention reads the normalized inputs.
    att_long, att_global, _, _ = block.attention(
        tf.constant(_norm(block.long_att_norm, long_x), tf.float32),
        tf.constant(_norm(block.global_att_norm, global_x), tf.float32), side)
    long_1 = long_x.numpy() + att_long.numpy()
    global_1 = global_x.numpy() + att_global.numpy()
    long_2 = long_1 + _ff(block.long_ff, _norm(block.long_ff_norm, long_1))
    global_2 = global_1 + _ff(block.global_ff,
                              _norm(block.global_ff_norm, global_1))
  else:
    # LN(x + f(x)) twice.
    att_long, att_global, _, _ = block.attention(long_x, global_x, side)
    long_1 = _norm(block.long_att_norm, long_x.numpy() + att_long.numpy())
    global_1 = _norm(block.global_att_norm,
                     global_x.numpy() + att_global.numpy())
    long_2 = _norm(block.long_ff_norm, long_1 + _ff(block.long_ff, long_1))
    global_2 = _norm(block.global_ff_norm,
                     global_1 + _ff(block.global_ff, global_1))
  _close(long_out.numpy(), long_2)
  _close(global_out.numpy(), global_2)


def test_hidden_dropout_follows_the_seed():
  block = _block(hidden_dropout_prob=0.5)
  long_x, global_x, side = _inputs()

  def run(training, seed):
    return [x.numpy() for x in block(long_x, global_x, side,
                                     training=training, seed=seed)[:2]]

  evaluated = run(False, tf.constant([1, 2]))
  np.testing.assert_array_equal(run(False, None)[0], evaluated[0])
  first = run(True, tf.constant([1, 2]))
  again = run(True, tf.constant([1, 2]))
  other = run(True, tf.constant([3, 4]))
  for a, b, c, e in zip(first, again, other, evaluated):
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c) and not np.allclose(a, e)
    assert np.isfinite(a).all()


def test_streams_and_probabilities_pass_through():
  block = _block()
  long_x, global_x, side = _inputs()
  _, _, streams, probs = block(long_x, global_x, side, return_probs=True)
  assert streams.l2l is not None and streams.g2g is not None
  assert streams.l2g is None and streams.g2l is None
  assert probs["l2l"].shape == (B, 2, L, 2 * R + 1)
  # The last layer emits no streams.
  _, _, streams, probs = block(long_x, global_x, side, emit_streams=False)
  assert streams is NO_STREAMS and probs is None


@pytest.mark.parametrize("share", [True, False])
def test_official_names(share):
  block = _block(share_feed_forward_params=share)
  names = block.official_variables()
  for norm in ("layer_norm_0", "layer_norm_1"):
    assert f"fused_att_layer_1/{norm}/gamma" in names
  assert any(n.startswith("fused_att_layer_1/fused_global_local_att/")
             for n in names)
  prefixes = (["feed_forward_layer_1"] if share else
              ["long_feed_forward_layer_1", "global_feed_forward_layer_1"])
  ff_names = {n for n in names if not n.startswith("fused_att_layer_1/")}
  assert ff_names == {
      f"{p}/{suffix}" for p in prefixes for suffix in (
          "dense_layers/layer_0/kernel", "dense_layers/layer_0/bias",
          "dense_layers/layer_1/kernel", "dense_layers/layer_1/bias",
          "layer_norm/gamma", "layer_norm/beta")}
  # Every variable of the layer has exactly one name.
  assert len({id(v) for v in names.values()}) == len(names) == len(
      block.trainable_variables)
