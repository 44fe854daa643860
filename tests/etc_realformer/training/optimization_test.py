"""Optimizer building: schedule, weight-decay exclusions, clipping, LAMB."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from etc_realformer.training import optimization


def test_warmup_then_linear_decay():
  opt = optimization.build_optimizer(train_steps=100, learning_rate=1e-3,
                                     warmup_steps=10)
  lr = opt.learning_rate
  values = [float(lr(s)) for s in (0, 5, 10, 55, 100)]
  # Linear warmup from 0; then BERT-style linear decay to 0 at train_steps.
  np.testing.assert_allclose(values, [0.0, 4.5e-4, 9e-4, 4.5e-4, 0.0],
                             atol=1e-9)
  # The default warmup is 10% of the steps (ramping to the decayed value
  # at its end, as Model Garden's LinearWarmup does).
  opt = optimization.build_optimizer(train_steps=100, learning_rate=1e-3)
  assert float(opt.learning_rate(5)) == pytest.approx(0.5 * 9e-4)


def _toy_variables():
  layer_norm = tf_keras.layers.LayerNormalization(name="layer_norm")
  dense = tf_keras.layers.Dense(3, name="dense")
  layer_norm.build([None, 3])
  dense.build([None, 3])
  for v in layer_norm.weights + dense.weights:
    v.assign(tf.ones_like(v))
  return layer_norm, dense


@pytest.mark.parametrize("kind", ["adamw", "lamb"])
def test_no_weight_decay_on_layer_norm_and_bias(kind):
  layer_norm, dense = _toy_variables()
  variables = layer_norm.weights + dense.weights
  opt = optimization.build_optimizer(train_steps=10, optimizer_type=kind,
                                     learning_rate=0.1, warmup_steps=0,
                                     weight_decay_rate=0.5)
  # Zero gradients: only weight decay can move a variable.
  opt.apply_gradients([(tf.zeros_like(v), v) for v in variables])
  moved = [not np.allclose(v.numpy(), 1.0) for v in variables]
  # gamma, beta, kernel, bias: only the kernel decays.
  assert moved == [False, False, True, False]


def test_global_norm_clipping():
  """A huge gradient moves the weights exactly like the same gradient
  rescaled to global norm 1 (plain Adam is scale-invariant only after the
  first step's bias correction, so compare two optimizers)."""
  def step(grad_scale, clip_norm):
    v = tf.Variable([1.0, 1.0])
    opt = optimization.build_optimizer(
        train_steps=10, learning_rate=0.1, warmup_steps=0,
        weight_decay_rate=0.0, clip_norm=clip_norm, epsilon=1.0)
    opt.apply_gradients([(tf.constant([3.0, 4.0]) * grad_scale, v)])
    return v.numpy()
  # epsilon=1 makes Adam's update depend on the gradient's scale.
  np.testing.assert_allclose(step(100.0, 1.0), step(1 / 5, 0.0), rtol=1e-6)


def test_unknown_optimizer_type():
  with pytest.raises(ValueError, match="optimizer_type"):
    optimization.build_optimizer(train_steps=10, optimizer_type="sgd")


def test_current_learning_rate_follows_iterations():
  opt = optimization.build_optimizer(train_steps=100, learning_rate=1.0,
                                     warmup_steps=0)
  opt.iterations.assign(50)
  assert float(optimization.current_learning_rate(opt)) == pytest.approx(0.5)
