"""The attention core's rules: RealFormer's stream rule, the fused softmax,
and one side computed whole or in chunks of rows."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.layers import attention_core as core
from etc_realformer.layers.attention_inputs import MASK_ADDER


def test_residual_rule():
  scores = tf.constant([1.0, 2.0])
  previous = tf.constant([3.0, -1.0])
  new, logits = core.residual_logits(scores, previous, True, 2, False)
  np.testing.assert_array_equal(new.numpy(), [4.0, 1.0])
  np.testing.assert_array_equal(logits.numpy(), [4.0, 1.0])
  # The running mean divides what the softmax sees, not what is carried.
  new, logits = core.residual_logits(scores, previous, True, 2, True)
  np.testing.assert_array_equal(new.numpy(), [4.0, 1.0])
  np.testing.assert_array_equal(logits.numpy(), [2.0, 0.5])
  # The first layer starts the sum; a pattern not carried has none.
  new, logits = core.residual_logits(scores, None, True, 1, True)
  np.testing.assert_array_equal(new.numpy(), scores.numpy())
  new, logits = core.residual_logits(scores, previous, False, 3, True)
  assert new is None
  np.testing.assert_array_equal(logits.numpy(), scores.numpy())


def test_fused_softmax_is_one_softmax_over_both_key_sets():
  rng = np.random.RandomState(0)
  a = rng.normal(size=[2, 3, 4]).astype(np.float32)
  b = rng.normal(size=[2, 3, 5]).astype(np.float32)
  valid = np.ones([2, 3, 1], np.float32)
  pa, pb = core.fused_softmax(tf.constant(a), tf.constant(b),
                              tf.constant(valid))
  joint = tf.nn.softmax(np.concatenate([a, b], -1)).numpy()
  np.testing.assert_allclose(np.concatenate([pa, pb], -1), joint, rtol=1e-6)
  pa, pb = core.fused_softmax(tf.constant(a), tf.constant(b),
                              tf.constant(valid), gain=2.0)
  np.testing.assert_allclose(np.concatenate([pa, pb], -1), 2.0 * joint,
                             rtol=1e-6)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float16])
def test_fully_masked_rows_get_zeros_in_every_dtype(dtype):
  # Every key masked: the adders make all logits -10000; the row is not
  # valid, so it attends to nothing (and stays finite).
  logits = tf.cast(tf.fill([2, 3], MASK_ADDER), dtype)
  pa, pb = core.fused_softmax(tf.cast(logits, tf.float32),
                              tf.cast(logits, tf.float32),
                              tf.zeros([2, 1]))
  assert np.all(pa.numpy() == 0.0) and np.all(pb.numpy() == 0.0)


def _side_pieces(rng, rows, keys_a, keys_b, d=4, heads=2):
  def normal(*shape):
    return tf.constant(rng.normal(size=shape).astype(np.float32))
  return {
      "q": normal(1, heads, rows, d),
      "g2g_k": normal(1, heads, keys_a, d), "g2g_v": normal(1, heads, keys_a,
                                                             d),
      "g2l_k": normal(1, heads, keys_b, d), "g2l_v": normal(1, heads, keys_b,
                                                             d),
      "g2g_adder": tf.constant(MASK_ADDER * (rng.rand(1, 1, rows, keys_a) <
                                             0.3), tf.float32),
      "g2l_adder": tf.constant(MASK_ADDER * (rng.rand(1, 1, rows, keys_b) <
                                             0.3), tf.float32),
      "valid": tf.ones([1, 1, rows, 1]),
      "stream/g2g": normal(1, heads, rows, keys_a),
      "seed": tf.constant([1, 2]),
  }


def test_a_side_in_chunks_of_rows_equals_the_whole():
  rng = np.random.RandomState(3)
  x = _side_pieces(rng, rows=7, keys_a=7, keys_b=11)
  spec = core.SideSpec(patterns=("g2g", "g2l"), carried=("g2g",),
                       num_summed=2, running_mean=True, rate=0.3,
                       training=True, first_site=18)
  whole = core.attend_side(spec, 0, 7, x)
  assert sorted(whole) == ["ctx", "stream/g2g"]
  row_pieces = ("q", "g2g_adder", "g2l_adder", "valid", "stream/g2g")
  for start, size in ((0, 3), (3, 4)):
    part = {k: (v[:, :, start:start + size] if k in row_pieces else v)
            for k, v in x.items()}
    chunk = core.attend_side(spec, start, size, part)
    for name in whole:
      np.testing.assert_allclose(chunk[name].numpy(),
                                 whole[name].numpy()[:, :, start:start + size],
                                 rtol=1e-6, atol=1e-6)
