"""RealFormer residual attention, carried per attention pattern."""

import numpy as np
import pytest
import tensorflow as tf

from encoder_testing import (max_abs_diff, model_weights, numpy_reference,
                             random_features, randomize_relative_bias,
                             tiny_config)
from etc_realformer import EtcModel


def _twin(config, source):
  """A model of `config` holding `source`'s weights."""
  model = EtcModel(config)
  model.build()
  targets = model.official_variables()
  for name, var in source.official_variables().items():
    if name in targets:  # a shallower twin takes the first layers
      targets[name].assign(var)
  return model


@pytest.fixture(scope="module")
def base():
  config = tiny_config(num_hidden_layers=3)
  model = EtcModel(config)
  model.build()
  randomize_relative_bias(model)
  feats = random_features(config, batch=2, long_len=12, global_len=4, seed=11)
  return config, model, feats


def test_first_layer_unchanged(base):
  config, model, feats = base
  one = config.replace(num_hidden_layers=1)
  off = _twin(one, model)
  on = _twin(one.replace(residual_attention=True), model)
  assert max_abs_diff(off(feats)[0], on(feats)[0]) == 0.0


def test_later_layers_change(base):
  config, model, feats = base
  on = _twin(config.replace(residual_attention=True), model)
  assert max_abs_diff(model(feats)[0], on(feats)[0]) > 1e-3


def test_off_equals_no_patterns(base):
  config, model, feats = base
  none = _twin(config.replace(residual_attention=True, residual_patterns=()),
               model)
  assert max_abs_diff(model(feats)[0], none(feats)[0]) == 0.0


@pytest.mark.parametrize("pattern", ["l2l", "l2g", "g2g", "g2l"])
def test_each_stream_switches_alone(base, pattern):
  config, model, feats = base
  only = _twin(config.replace(residual_attention=True,
                              residual_patterns=(pattern,)), model)
  all_but = _twin(config.replace(
      residual_attention=True,
      residual_patterns=tuple(p for p in ("l2l", "l2g", "g2g", "g2l")
                              if p != pattern)), model)
  everything = _twin(config.replace(residual_attention=True), model)
  out_off, out_only = model(feats), only(feats)
  out_all_but, out_all = all_but(feats), everything(feats)
  # The pattern's own query side shows the change first (g2g moves the
  # global output), so look at both outputs.
  assert max(max_abs_diff(a, b) for a, b in zip(out_off, out_only)) > 1e-4
  assert max(max_abs_diff(a, b) for a, b in zip(out_all_but, out_all)) > 1e-4
  ref = numpy_reference(model_weights(only), only.config, feats)
  assert max_abs_diff(out_only[0], ref[0]) < 1e-5
  assert max_abs_diff(out_only[1], ref[1]) < 1e-5


@pytest.mark.parametrize("running_mean", [False, True])
@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_matches_independent_numpy_reference(running_mean, impl):
  config = tiny_config(num_hidden_layers=2, residual_attention=True,
                       residual_running_mean=running_mean)
  model = EtcModel(config)
  model.build()
  randomize_relative_bias(model)
  feats = random_features(config, batch=2, long_len=13, global_len=5, seed=7)
  ref_long, ref_global, ref_probs = numpy_reference(
      model_weights(model), config, feats, return_probs=True)
  long_out, global_out, probs = model(feats, att_implementation=impl,
                                      return_attention_probs=True)
  assert max_abs_diff(long_out, ref_long) < 1e-5
  assert max_abs_diff(global_out, ref_global) < 1e-5
  # l2l probabilities come back in the window layout; compare on the band.
  for layer in range(2):
    for p in ("l2g", "g2g", "g2l"):
      assert max_abs_diff(probs[layer][p], ref_probs[layer][p]) < 1e-5


def test_running_mean_differs_from_sum():
  config = tiny_config(num_hidden_layers=2, residual_attention=True)
  model = EtcModel(config)
  model.build()
  randomize_relative_bias(model, scale=1.0)  # scores large enough to matter
  feats = random_features(config, batch=1, long_len=8, global_len=3, seed=2)
  mean = _twin(config.replace(residual_running_mean=True), model)
  assert max_abs_diff(model(feats)[0], mean(feats)[0]) > 1e-4


@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_gradients_flow_through_streams(impl):
  # Layer 0's relative bias enters layer 1's logits only through the stream
  # (besides the hidden states). Compare autodiff with central differences.
  config = tiny_config(num_hidden_layers=2, residual_attention=True)
  model = EtcModel(config)
  model.build()
  randomize_relative_bias(model, scale=0.3)
  feats = random_features(config, batch=1, long_len=9, global_len=3, seed=4,
                          fully_masked_rows=False)
  names = model.official_variables()
  bias = names["etc_document_bert/global_local_transformer_layers/"
               "fused_att_layer_0/fused_global_local_att/global_qkv_attention/"
               "relative_bias_table"]
  probe = tf.constant(np.random.RandomState(0).normal(
      size=[1, 9, config.hidden_size]).astype(np.float32))

  def loss():
    long_out, global_out = model(feats, att_implementation=impl)
    return tf.reduce_sum(long_out * probe) + tf.reduce_sum(global_out)

  with tf.GradientTape() as tape:
    value = loss()
  grad = tape.gradient(value, bias).numpy()
  assert np.abs(grad).max() > 0
  original = bias.numpy()
  eps = 1e-2
  for index in [(0, 0), (3, 1), (int(np.argmax(np.abs(grad[:, 0]))), 0)]:
    plus, minus = original.copy(), original.copy()
    plus[index] += eps
    minus[index] -= eps
    bias.assign(plus)
    f_plus = float(loss())
    bias.assign(minus)
    f_minus = float(loss())
    bias.assign(original)
    numeric = (f_plus - f_minus) / (2 * eps)
    assert abs(numeric - grad[index]) <= 2e-2 * max(1.0, abs(numeric))
