"""Gradient checkpointing recomputes layers without changing the math."""

import numpy as np
import pytest
import tensorflow as tf

from encoder_testing import random_features, tiny_config
from etc_realformer import EtcModel


def _loss_and_grads(model, feats, probe_long, probe_global, impl):
  tf.random.set_seed(1234)  # the per-call dropout seed is drawn from here
  with tf.GradientTape() as tape:
    long_out, global_out = model(feats, training=True,
                                 att_implementation=impl)
    loss = (tf.reduce_sum(long_out * probe_long) +
            tf.reduce_sum(global_out * probe_global))
  grads = tape.gradient(loss, model.trainable_variables)
  return float(loss), [tf.convert_to_tensor(g).numpy() for g in grads]


@pytest.mark.parametrize("period", [1, 2])
@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_same_loss_and_gradients_with_dropout(period, impl):
  config = tiny_config(num_hidden_layers=3, hidden_dropout_prob=0.2,
                       attention_probs_dropout_prob=0.2,
                       residual_attention=True)
  plain = EtcModel(config)
  plain.build()
  ckpt = EtcModel(config.replace(grad_checkpointing_period=period))
  ckpt.build()
  targets = ckpt.official_variables()
  for name, var in plain.official_variables().items():
    targets[name].assign(var)
  feats = random_features(config, batch=2, long_len=11, global_len=4, seed=9)
  rng = np.random.RandomState(0)
  probe_long = rng.normal(size=[2, 11, config.hidden_size]).astype(np.float32)
  probe_global = rng.normal(size=[2, 4, config.hidden_size]).astype(np.float32)

  loss_a, grads_a = _loss_and_grads(plain, feats, probe_long, probe_global,
                                    impl)
  loss_b, grads_b = _loss_and_grads(ckpt, feats, probe_long, probe_global,
                                    impl)
  assert abs(loss_a - loss_b) < 1e-5 * max(1.0, abs(loss_a))
  for ga, gb in zip(grads_a, grads_b):
    np.testing.assert_allclose(ga, gb, atol=1e-5, rtol=1e-5)
  # Dropout really was on: an inference pass gives another loss.
  eval_long, eval_global = plain(feats, training=False,
                                 att_implementation=impl)
  eval_loss = float(tf.reduce_sum(eval_long * probe_long) +
                    tf.reduce_sum(eval_global * probe_global))
  assert abs(eval_loss - loss_a) > 1e-3


def test_dropout_is_deterministic_per_seed():
  config = tiny_config(hidden_dropout_prob=0.3,
                       attention_probs_dropout_prob=0.3)
  model = EtcModel(config)
  model.build()
  feats = random_features(config, batch=1, long_len=8, global_len=3)
  tf.random.set_seed(5)
  a = model(feats, training=True)[0].numpy()
  tf.random.set_seed(5)
  b = model(feats, training=True)[0].numpy()
  c = model(feats, training=True)[0].numpy()
  assert np.array_equal(a, b)
  assert not np.array_equal(b, c)


@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_attention_recomputation_same_loss_and_gradients(impl):
  config = tiny_config(num_hidden_layers=2, hidden_dropout_prob=0.2,
                       attention_probs_dropout_prob=0.2,
                       residual_attention=True)
  plain = EtcModel(config)
  plain.build()
  recompute = EtcModel(config.replace(recompute_attention=True))
  recompute.build()
  targets = recompute.official_variables()
  for name, var in plain.official_variables().items():
    targets[name].assign(var)
  feats = random_features(config, batch=2, long_len=10, global_len=3, seed=4)
  rng = np.random.RandomState(1)
  probe_long = rng.normal(size=[2, 10, config.hidden_size]).astype(np.float32)
  probe_global = rng.normal(size=[2, 3, config.hidden_size]).astype(np.float32)
  loss_a, grads_a = _loss_and_grads(plain, feats, probe_long, probe_global,
                                    impl)
  loss_b, grads_b = _loss_and_grads(recompute, feats, probe_long,
                                    probe_global, impl)
  assert abs(loss_a - loss_b) < 1e-5 * max(1.0, abs(loss_a))
  for ga, gb in zip(grads_a, grads_b):
    np.testing.assert_allclose(ga, gb, atol=1e-5, rtol=1e-5)
