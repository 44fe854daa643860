"""`relative_scores`: the same picks and gradients with TensorFlow's kernels
and under XLA, where the gradient is a masked sum per id, not a scatter."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.attention import relative_table
from etc_realformer.attention.relative_table import relative_scores


def _inputs(batch=2, rows=5, num_ids=6, heads=3, keys=7, seed=0):
  rng = np.random.RandomState(seed)
  per_id = tf.constant(rng.normal(size=[batch, rows, num_ids, heads]),
                       tf.float32)
  # Few distinct ids per row, as l2g rows have: many keys share one id.
  ids = tf.constant(rng.randint(0, 2, size=[batch, rows, keys]) * 3,
                    tf.int32)
  probe = tf.constant(rng.normal(size=[batch, heads, rows, keys]),
                      tf.float32)
  return per_id, ids, probe


def _picked_and_grad(per_id, ids, probe):
  with tf.GradientTape() as tape:
    tape.watch(per_id)
    picked = relative_scores(per_id, ids)
    loss = tf.reduce_sum(picked * probe)
  return picked, tape.gradient(loss, per_id)


def _expected(per_id, ids, probe):
  p, i, d = per_id.numpy(), ids.numpy(), probe.numpy()
  picked = np.zeros(d.shape, np.float32)
  grad = np.zeros(p.shape, np.float32)
  for b, n, k in np.ndindex(*i.shape):
    picked[b, :, n, k] = p[b, n, i[b, n, k], :]
    grad[b, n, i[b, n, k], :] += d[b, :, n, k]
  return picked, grad


@pytest.mark.parametrize("min_keys", [1, 8192])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_picks_and_gradient(jit_compile, min_keys, monkeypatch):
  # min_keys = 1: under XLA the masked-sum gradient; 8192: the gather's.
  monkeypatch.setattr(relative_table, "MASKED_SUM_MIN_KEYS", min_keys)
  per_id, ids, probe = _inputs()
  fn = tf.function(_picked_and_grad, jit_compile=jit_compile)
  picked, grad = fn(per_id, ids, probe)
  want_picked, want_grad = _expected(per_id, ids, probe)
  np.testing.assert_array_equal(picked.numpy(), want_picked)
  np.testing.assert_allclose(grad.numpy(), want_grad, rtol=1e-5,
                             atol=1e-5 * np.abs(want_grad).max())
  # Ids that no key has get no gradient.
  assert not grad.numpy()[:, :, [1, 2, 4, 5], :].any()


def _xla_hlo():
  per_id, ids, probe = _inputs()
  fn = tf.function(_picked_and_grad, jit_compile=True)
  return fn.experimental_get_compiler_ir(per_id, ids, probe)(stage="hlo")


def test_xla_gradient_is_a_masked_sum_for_long_rows(monkeypatch):
  # Rows of at least MASKED_SUM_MIN_KEYS keys (7 here): no scatter.
  monkeypatch.setattr(relative_table, "MASKED_SUM_MIN_KEYS", 7)
  hlo = _xla_hlo()
  assert "gather(" in hlo and "scatter(" not in hlo
  # Shorter rows keep the gather's scatter-add.
  monkeypatch.setattr(relative_table, "MASKED_SUM_MIN_KEYS", 8)
  assert "scatter(" in _xla_hlo()


def test_initial_biases_one_for_all_heads_or_one_per_head():
  table = relative_table.RelativeTable(
      6, 3, 4, initial_biases={0: [1.0, 2.0, 3.0], 4: -5.0})
  table.build()
  biases = table.bias_table.numpy()
  np.testing.assert_array_equal(biases[0], [1.0, 2.0, 3.0])
  np.testing.assert_array_equal(biases[4], [-5.0] * 3)
  assert np.all(np.delete(biases, [0, 4], axis=0) == 0.0)


@pytest.mark.parametrize("biases, match", [
    ({6: 1.0}, "outside the vocabulary"),
    ({1: [1.0, 2.0]}, "one per head"),
    ({1: [[1.0, 2.0, 3.0]]}, "one per head"),
])
def test_initial_biases_checked(biases, match):
  with pytest.raises(ValueError, match=match):
    relative_table.RelativeTable(6, 3, 4, initial_biases=biases)
