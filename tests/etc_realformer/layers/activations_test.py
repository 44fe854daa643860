"""`activations.gelu` (the feed-forward's gelu, with a recomputed, XLA-fused
gradient) and the activations by config name."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.layers.activations import ACTIVATIONS
from etc_realformer.layers.activations import gelu as lean_gelu
from etc_realformer.layers.activations import get_activation


def _grads(fn, x, dy):
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = fn(x)
  return y, tape.gradient(y, x, output_gradients=dy)


@pytest.mark.parametrize("in_function", [False, True])
def test_float32_values_and_gradient_match_the_plain_op(in_function):
  rng = np.random.RandomState(0)
  # Wide range: the tails (tanh saturated) and the curved middle.
  x = tf.constant(rng.uniform(-8, 8, [37, 129]).astype(np.float32))
  dy = tf.constant(rng.normal(size=[37, 129]).astype(np.float32))

  def run(fn):
    if in_function:
      return tf.function(lambda a, b: _grads(fn, a, b))(x, dy)
    return _grads(fn, x, dy)

  y, g = run(lean_gelu)
  y_ref, g_ref = run(lambda t: tf.nn.gelu(t, approximate=True))
  # The same forward op (graph rewrites may round differently in a function).
  np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-6, atol=1e-6)
  # XLA's tanh differs from Eigen's by a few float32 ulps.
  np.testing.assert_allclose(g.numpy(), g_ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_half_precision_keeps_dtype_and_is_finite(dtype):
  rng = np.random.RandomState(1)
  x32 = rng.uniform(-6, 6, [16, 64]).astype(np.float32)
  x = tf.cast(x32, dtype)
  dy = tf.cast(tf.ones([16, 64]), dtype)
  y, g = _grads(lean_gelu, x, dy)
  assert y.dtype == dtype and g.dtype == dtype
  assert np.all(np.isfinite(tf.cast(g, tf.float32).numpy()))
  # The derivative is computed in float32 from the rounded input.
  _, g_ref = _grads(lambda t: tf.nn.gelu(t, approximate=True),
                    tf.cast(x, tf.float32), tf.ones([16, 64]))
  np.testing.assert_allclose(tf.cast(g, tf.float32).numpy(), g_ref.numpy(),
                             rtol=1e-2, atol=1e-2)


def test_dynamic_shapes_in_one_function():
  fn = tf.function(lambda a: _grads(lean_gelu, a, tf.ones_like(a))[1],
                   input_signature=[tf.TensorSpec([None, None], tf.float32)])
  for shape in ([3, 5], [7, 2]):
    x = tf.random.stateless_normal(shape, [1, 2])
    _, g_ref = _grads(lambda t: tf.nn.gelu(t, approximate=True), x,
                      tf.ones_like(x))
    np.testing.assert_allclose(fn(x).numpy(), g_ref.numpy(), rtol=1e-5,
                               atol=1e-5)


def test_every_config_name_has_an_activation():
  x = tf.constant([-1.0, 0.0, 2.0])
  for name in ACTIVATIONS:
    assert get_activation(name)(x).shape == x.shape
  assert get_activation("gelu") is lean_gelu
  with pytest.raises(ValueError, match="swish"):
    get_activation("swish")
