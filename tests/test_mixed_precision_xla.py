"""Mixed precision (bfloat16, float16) and XLA compilation of the encoder."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from encoder_testing import (max_abs_diff, random_features, spy_chunked_calls,
                             randomize_relative_bias, tiny_config)
from etc_realformer import EtcModel


@pytest.fixture(scope="module")
def float32_model():
  config = tiny_config(num_hidden_layers=2, residual_attention=True)
  model = EtcModel(config)
  model.build()
  randomize_relative_bias(model)
  return config, model


@pytest.mark.parametrize("policy,tolerance", [("mixed_bfloat16", 0.15),
                                              ("mixed_float16", 0.02)])
@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_mixed_precision_finite_and_close(float32_model, policy, tolerance,
                                          impl):
  config, reference = float32_model
  # Fully masked rows included (random_features makes some).
  feats = random_features(config, batch=2, long_len=13, global_len=5, seed=8)
  expected = reference(feats, att_implementation=impl)
  tf_keras.mixed_precision.set_global_policy(policy)
  try:
    model = EtcModel(config)
    model.build()
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")
  targets = model.official_variables()
  for name, var in reference.official_variables().items():
    targets[name].assign(var)
  long_out, global_out, probs = model(feats, att_implementation=impl,
                                      return_attention_probs=True)
  assert long_out.dtype == tf.as_dtype(policy.split("_")[1])
  for out, exp in zip((long_out, global_out), expected):
    out = tf.cast(out, tf.float32).numpy()
    assert np.isfinite(out).all()
    assert max_abs_diff(out, exp) < tolerance
  for layer in probs:
    for p in layer.values():
      assert np.isfinite(p.numpy()).all()


@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_xla_matches_eager(float32_model, impl):
  config, model = float32_model
  feats = random_features(config, batch=2, long_len=16, global_len=4, seed=6)
  compiled = tf.function(
      lambda f: model(f, att_implementation=impl), jit_compile=True)
  xla = compiled({k: tf.constant(v) for k, v in feats.items()})
  eager = model(feats, att_implementation=impl)
  for a, b in zip(xla, eager):
    assert max_abs_diff(a, b) < 1e-5


def test_xla_training_step_with_dropout_and_checkpointing():
  config = tiny_config(hidden_dropout_prob=0.1,
                       attention_probs_dropout_prob=0.1,
                       residual_attention=True, grad_checkpointing_period=1)
  model = EtcModel(config)
  model.build()
  feats = {k: tf.constant(v) for k, v in random_features(
      config, batch=1, long_len=12, global_len=3).items()}

  @tf.function(jit_compile=True)
  def step(f):
    with tf.GradientTape() as tape:
      long_out, global_out = model(f, training=True, att_implementation="sparse")
      loss = tf.reduce_mean(long_out[..., 0]) + tf.reduce_mean(global_out)
    return loss, tape.gradient(loss, model.trainable_variables)

  loss, grads = step(feats)
  assert np.isfinite(loss.numpy())
  assert all(np.isfinite(tf.convert_to_tensor(g).numpy()).all()
             for g in grads)


@pytest.mark.parametrize("changes", [
    dict(attention_chunk_len=3),
    dict(attention_chunk_len=3, recompute_residual_streams=True),
    dict(attention_chunk_len=4, grad_checkpointing_period=1)])
def test_xla_chunked_training_step_matches_graph(changes):
  # Configurations that chunk the attention core, as inputs longer than
  # 4096 tokens do by default. Under XLA the core is computed whole (or, with
  # recomputed streams, as one chunk); the plain graph chunks it. Both must
  # give the same loss and gradients.
  config = tiny_config(num_hidden_layers=3, local_radius=2,
                       residual_attention=True, **changes)
  model = EtcModel(config)
  model.build()
  randomize_relative_bias(model)
  feats = {k: tf.constant(v) for k, v in random_features(
      config, batch=2, long_len=13, global_len=4, seed=3).items()}

  def step(f):
    with tf.GradientTape() as tape:
      long_out, global_out = model(f, training=True,
                                   att_implementation="sparse")
      loss = (tf.reduce_sum(tf.square(long_out)) +
              tf.reduce_sum(tf.square(global_out)))
    return loss, tape.gradient(loss, model.trainable_variables)

  loss_xla, grads_xla = tf.function(step, jit_compile=True)(feats)
  loss_ref, grads_ref = tf.function(step)(feats)
  np.testing.assert_allclose(loss_xla.numpy(), loss_ref.numpy(), rtol=1e-5)
  grads_xla = [tf.convert_to_tensor(g).numpy() for g in grads_xla]
  grads_ref = [tf.convert_to_tensor(g).numpy() for g in grads_ref]
  # XLA fuses and sums in its own order: float32 noise scales with the
  # largest gradient (~150 here), and some gradients are that noise alone
  # (~1e-5: biases feeding a layer norm), hence one absolute allowance.
  scale = max(np.abs(g).max() for g in grads_ref)
  for gx, gr in zip(grads_xla, grads_ref):
    assert np.isfinite(gx).all()
    np.testing.assert_allclose(gx, gr, rtol=1e-4, atol=1e-5 + 2e-6 * scale)


def test_xla_skips_chunking(monkeypatch):
  # Under XLA the chunk order does not bound memory (it raised the peak), so
  # the layer computes the core whole there; plain graphs still chunk.
  config = tiny_config(num_hidden_layers=2, residual_attention=True,
                       attention_chunk_len=3)
  model = EtcModel(config)
  model.build()
  feats = {k: tf.constant(v) for k, v in random_features(
      config, batch=1, long_len=13, global_len=4, seed=2).items()}
  calls = spy_chunked_calls(monkeypatch)

  def forward(f):
    return model(f, training=True, att_implementation="sparse")

  xla = tf.function(forward, jit_compile=True)(feats)
  assert not calls
  graph = tf.function(forward)(feats)
  assert calls
  for a, b in zip(xla, graph):
    assert max_abs_diff(a, b) < 1e-5
