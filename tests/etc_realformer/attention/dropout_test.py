"""Seeded dropout: rate, scaling, determinism, both generators."""

import re

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.attention import dropout
from etc_realformer.attention.dropout import keep_gain
from etc_realformer.attention.dropout import stateless_dropout

RNGS = dropout.DROPOUT_RNGS


@pytest.mark.parametrize("rng", RNGS)
@pytest.mark.parametrize("rate", [0.1, 0.5])
@pytest.mark.parametrize("shape", [[4, 1001], [3, 5, 7]])  # odd sizes too
def test_rate_and_scale(rate, shape, rng):
  x = tf.ones(shape)
  seed = tf.constant([3, 4])
  y = stateless_dropout(x, rate, seed, site=7, training=True,
                        rng=rng).numpy()
  assert y.shape == tuple(shape)
  kept = y != 0
  assert abs(kept.mean() - (1 - rate)) < 4 * np.sqrt(rate * (1 - rate) /
                                                       kept.size)
  np.testing.assert_allclose(y[kept], 1.0 / (1.0 - rate), rtol=1e-4)
  # Unbiased in expectation.
  big = stateless_dropout(tf.ones([200000]), rate, seed, 1, True,
                          rng=rng).numpy()
  assert abs(big.mean() - 1.0) < 0.01


@pytest.mark.parametrize("rng", RNGS)
def test_same_seed_same_mask_other_site_other_mask(rng):
  x = tf.random.normal([64, 64])
  seed = tf.constant([1, 2])
  a = stateless_dropout(x, 0.3, seed, 5, True, rng=rng)
  b = stateless_dropout(x, 0.3, seed, 5, True, rng=rng)
  c = stateless_dropout(x, 0.3, seed, 6, True, rng=rng)
  assert np.array_equal(a.numpy(), b.numpy())
  assert not np.array_equal(a.numpy(), c.numpy())


def test_identity_when_not_training_and_bfloat16_kept():
  x = tf.cast(tf.random.normal([8, 8]), tf.bfloat16)
  assert stateless_dropout(x, 0.5, None, 0, False) is x
  y = stateless_dropout(x, 0.5, tf.constant([1, 1]), 0, True)
  assert y.dtype == tf.bfloat16


def test_keep_gain_is_one_over_the_mask_keep_probability():
  assert keep_gain(0.1) == 1.0 / (1.0 - 6554 / 65536)  # 0.1 to 1/65536
  assert keep_gain(0.1, training=False) == 1.0
  assert keep_gain(0.0) == 1.0


def test_prescaled_applies_the_same_mask_without_scaling():
  x = tf.random.normal([6, 333])
  seed = tf.constant([9, 8])
  scaled = stateless_dropout(x, 0.2, seed, 4, True)
  prescaled = stateless_dropout(x * keep_gain(0.2), 0.2, seed, 4, True,
                                prescaled=True)
  np.testing.assert_allclose(prescaled.numpy(), scaled.numpy(), rtol=1e-6)
  unscaled = stateless_dropout(x, 0.2, seed, 4, True, prescaled=True).numpy()
  kept = unscaled != 0
  np.testing.assert_array_equal(unscaled[kept], x.numpy()[kept])


@pytest.mark.parametrize("rng", RNGS)
def test_row_keep_mask_pieces_equal_the_whole(rng):
  seed = tf.constant([7, 11], tf.int32)
  whole = dropout.row_keep_mask(seed, 3, 0.3, 0, tf.constant([2, 9, 3, 5]),
                                row_axis=1, rng=rng).numpy()
  assert whole.shape == (2, 9, 3, 5)
  assert 0.5 < whole.mean() < 0.9
  for start, size in ((0, 1), (1, 3), (4, 5), (8, 1)):
    piece = dropout.row_keep_mask(seed, 3, 0.3, start,
                                  tf.constant([2, size, 3, 5]), row_axis=1,
                                  rng=rng)
    np.testing.assert_array_equal(piece.numpy(),
                                  whole[:, start:start + size])
  other = dropout.row_keep_mask(seed, 4, 0.3, 0, tf.constant([2, 9, 3, 5]),
                                row_axis=1, rng=rng).numpy()
  assert (other != whole).any()


@pytest.mark.parametrize("rng", RNGS)
def test_row_dropout_scales_like_stateless_dropout(rng):
  x = tf.ones([2, 3, 40, 7])
  seed = tf.constant([5, 6])
  y = dropout.row_dropout(x, 0.25, seed, 2, True, rng=rng).numpy()
  kept = y != 0
  np.testing.assert_allclose(y[kept], keep_gain(0.25), rtol=1e-6)
  assert abs(kept.mean() - 0.75) < 0.05
  assert dropout.row_dropout(x, 0.25, seed, 2, False, rng=rng) is x


def test_row_major_index_is_the_rows_first_position():
  shape = [2, 4, 3, 5]
  index = dropout.row_major_index(tf.constant(shape), 1, 6).numpy()
  # Rows first: [rows, 2, 3, 5], the tensor's rows being 6..9 of the whole.
  expected = np.transpose(
      np.arange(10 * 2 * 3 * 5).reshape(10, 2, 3, 5)[6:10], (1, 0, 2, 3))
  np.testing.assert_array_equal(index, expected)
  assert index.dtype == np.uint32
  shifted = dropout.row_major_index(tf.constant(shape), 1, 6, offset=5)
  np.testing.assert_array_equal(shifted.numpy(), expected + 5)


def test_hash_mask_is_hash_bits_of_the_rows_first_pairs():
  seed, shape = tf.constant([4, 2]), tf.constant([2, 3, 5])
  keep = dropout.row_keep_mask(seed, 9, 0.5, 2, shape, 1, "hash").numpy()
  # Pairs of the 5 columns: [rows, 2, 3] over rows 2.., 5 // 2 + 1 = 3 a row.
  pairs = dropout.row_major_index(tf.constant([2, 3, 3]), 1, 2).numpy()
  bits = dropout.hash_bits(dropout.fold_seed(seed, 9),
                           tf.constant(pairs)).numpy()
  column = np.arange(5)
  half = np.where(column % 2 == 1, bits[..., column // 2] & 0xFFFF,
                  bits[..., column // 2] >> 16)
  np.testing.assert_array_equal(keep, half >= 32768)


def test_hash_pairs_on_the_band_pair_by_key():
  # Row blocks of b = 3 along axis 1, from block 5; columns are the band's
  # 3b = 9: block k's column c is key 3k + c.
  b, shape = 3, tf.constant([2, 4, 3, 9])
  index, low = dropout.hash_pairs(shape, 1, 5, band_block_len=b)
  index, low = index.numpy(), low.numpy()
  plain = dropout.hash_pairs(shape, 1, 5)[0].numpy()
  for k in range(4):
    key = (5 + k) * b + np.arange(9)
    np.testing.assert_array_equal(
        np.broadcast_to(low, index.shape)[:, k],
        np.broadcast_to(key % 2 == 1, index[:, k].shape))
    # Columns whose keys pair up share an index; pairs count from the
    # row's first key's pair.
    pair = key // 2 - key[0] // 2
    np.testing.assert_array_equal(index[:, k], plain[:, k, :, :1] + pair)
  # An even b pairs columns as the plain layout does.
  even, even_low = dropout.hash_pairs(tf.constant([2, 4, 4, 12]), 1, 5,
                                      band_block_len=4)
  plain, plain_low = dropout.hash_pairs(tf.constant([2, 4, 4, 12]), 1, 5)
  np.testing.assert_array_equal(even.numpy(), plain.numpy())
  np.testing.assert_array_equal(
      np.broadcast_to(even_low.numpy(), even.shape),
      np.broadcast_to(plain_low.numpy(), plain.shape))


@pytest.mark.parametrize("shape,row_axis,band_block_len,rng", [
    ([2, 4, 3, 9], 1, 3, "hash"), ([2, 3, 5], 1, 0, "hash"),
    ([7], 0, 0, "hash"), ([2, 4, 3, 9], 1, 0, "philox"),
    ([7], 0, 0, "philox")])
def test_masks_same_from_static_and_traced_shapes(shape, row_axis,
                                                  band_block_len, rng):
  # Known shapes build the counter, the slice and the hash index from
  # Python ints and constants, unknown ones from the shape tensor: the same
  # bits, the row start a Python int or a tensor.
  seed = tf.constant([5, 8])
  for row_start in (2**31 + 3, tf.constant(6)):
    mask = lambda s: dropout.row_keep_mask(seed, 4, 0.3, row_start, s,
                                           row_axis, rng, band_block_len)
    traced = tf.function(lambda x: mask(tf.shape(x)), input_signature=[
        tf.TensorSpec([None] * len(shape))])
    np.testing.assert_array_equal(mask(tf.constant(shape)).numpy(),
                                  traced(tf.zeros(shape)).numpy())
  x = tf.random.stateless_normal(shape, [1, 2])
  whole = lambda x: dropout.stateless_dropout(x, 0.3, seed, 4, True, rng=rng)
  traced = tf.function(whole, input_signature=[
      tf.TensorSpec([None] * len(shape))])
  np.testing.assert_array_equal(whole(x).numpy(), traced(x).numpy())


def test_hash_mask_halves_are_independent():
  # The two columns of a pair, decided by one hash's halves.
  keep = dropout.row_keep_mask(tf.constant([7, 1]), 3, 0.5, 0,
                               tf.constant([512, 1024]), 0, "hash").numpy()
  even, odd = keep[:, 0::2].ravel(), keep[:, 1::2].ravel()
  n = even.size
  assert abs(even.mean() - 0.5) < 5 * 0.5 / np.sqrt(n)
  assert abs(odd.mean() - 0.5) < 5 * 0.5 / np.sqrt(n)
  assert abs(np.corrcoef(even, odd)[0, 1]) < 5 / np.sqrt(n)


def test_hash_bits_are_uniform_and_uncorrelated():
  n = 1 << 18
  bits = dropout.hash_bits(tf.constant([3, 9]),
                           tf.cast(tf.range(n), tf.uint32)).numpy()
  u = bits.astype(np.float64) / 2**32
  # Uniform: every one of 16 bins within 5 standard errors.
  counts = np.bincount((u * 16).astype(int), minlength=16)
  assert np.all(np.abs(counts - n / 16) < 5 * np.sqrt(n / 16))
  # Each bit set half the time.
  for bit in range(32):
    ones = ((bits >> bit) & 1).mean()
    assert abs(ones - 0.5) < 5 * 0.5 / np.sqrt(n), bit
  # Neighbouring indices (what one row of a mask holds) and other keys.
  other = dropout.hash_bits(tf.constant([3, 10]),
                            tf.cast(tf.range(n), tf.uint32)).numpy()
  for a, b in ((u[:-1], u[1:]), (u, other.astype(np.float64) / 2**32)):
    assert abs(np.corrcoef(a, b)[0, 1]) < 5 / np.sqrt(n)


def test_hash_mask_under_xla_equals_graph_and_draws_no_random_op():
  x = tf.ones([2, 3, 50, 7])
  seed = tf.constant([5, 6])

  def drop(x):
    return dropout.row_dropout(x, 0.1, seed, 2, True, rng="hash")

  graph = tf.function(drop)(x)
  xla = tf.function(drop, jit_compile=True)
  np.testing.assert_array_equal(xla(x).numpy(), graph.numpy())
  # Random bits are drawn only to fold the site into the seed (a few
  # words); Philox draws the mask's.
  assert max(_random_words(xla.experimental_get_compiler_ir(x)(
      stage="hlo"))) < 8
  philox = tf.function(lambda x: dropout.row_dropout(x, 0.1, seed, 2, True),
                       jit_compile=True)
  assert max(_random_words(philox.experimental_get_compiler_ir(x)(
      stage="hlo"))) >= x.shape.num_elements() // 2
  # No mask-sized constant either: TensorFlow folds index arithmetic on
  # static shapes when nothing at run time enters it.
  x = tf.ones([4, 64, 96])
  step = tf.function(lambda x: dropout.stateless_dropout(
      x, 0.1, dropout.new_call_seed(), 3, True, rng="hash"),
                     jit_compile=True)
  assert _largest_constant_bytes(step, x) < x.shape.num_elements()


def _largest_constant_bytes(fn, *args) -> int:
  from tensorflow.compiler.xla.service import hlo_pb2
  module = hlo_pb2.HloModuleProto.FromString(
      fn.experimental_get_compiler_ir(*args)(stage="hlo_serialized"))
  return max(op.ByteSize() for c in module.computations
             for op in c.instructions if op.opcode == "constant")


def _random_words(hlo: str) -> list:
  """The number of 32-bit words each rng-bit-generator of `hlo` draws."""
  words = []
  for line in hlo.splitlines():
    if " rng-bit-generator(" in line:
      bits = re.search(r"= \(u64\[\d+\]\S*, u32\[([0-9,]*)\]",
                       line).group(1)
      words.append(int(np.prod([int(d) for d in bits.split(",") if d])))
  return words


def test_unknown_generator_is_refused():
  with pytest.raises(ValueError, match="rng"):
    stateless_dropout(tf.ones([4]), 0.5, tf.constant([1, 2]), 0, True,
                      rng="threefry")


def test_execution_config_names_the_same_generators():
  from etc_realformer import execution
  assert execution.DROPOUT_RNGS == dropout.DROPOUT_RNGS


def test_site_table_is_unique_per_layer():
  offsets = [*dropout.ATTENTION_PROBS_OFFSET.values(),
             dropout.ATTENTION_OUTPUT_LONG_OFFSET,
             dropout.ATTENTION_OUTPUT_GLOBAL_OFFSET,
             dropout.FEED_FORWARD_LONG_OFFSET,
             dropout.FEED_FORWARD_GLOBAL_OFFSET]
  assert len(set(offsets)) == len(offsets)
  assert max(offsets) < dropout.SITES_PER_LAYER
  sites = {dropout.SITE_EMBEDDING_LONG, dropout.SITE_EMBEDDING_GLOBAL}
  for layer in range(3):
    layer_sites = {dropout.layer_sites(layer) + o for o in offsets}
    assert not sites & layer_sites
    sites |= layer_sites
