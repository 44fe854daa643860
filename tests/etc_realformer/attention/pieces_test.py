"""The attention core's typed pieces: how tf.nest flattens them, the layouts
`branch_inputs` puts them in, and how `chunk_cuts` cuts them."""

import numpy as np
import tensorflow as tf

from etc_realformer.attention import blocking
from etc_realformer.attention.chunking import ChunkInput
from etc_realformer.attention.pieces import branch_inputs
from etc_realformer.attention.pieces import BranchInputs
from etc_realformer.attention.pieces import BranchMasks
from etc_realformer.attention.pieces import chunk_cuts
from etc_realformer.attention.pieces import PatternPair
from etc_realformer.attention.pieces import ScoreInputs

B, H, D, L, G, R = 1, 2, 4, 6, 3, 5
RADIUS = 1
BLOCK = RADIUS + 1


def _normal(*shape):
  return tf.constant(np.random.RandomState(sum(shape)).normal(
      size=shape).astype(np.float32))


def _long_branch(with_ids=True):
  """The long branch's tensors as the layer makes them (raw layouts)."""
  scores = ScoreInputs(_normal(B, H, L, D),
                       PatternPair(_normal(B, H, L, D), _normal(B, H, G, D)),
                       _normal(B, L, R, H))
  values = PatternPair(_normal(B, H, L, D), _normal(B, H, G, D))
  nb = L // BLOCK
  masks = BranchMasks(
      adders=PatternPair(tf.zeros([B, 1, nb, BLOCK, 3 * BLOCK]),
                         tf.zeros([B, 1, nb, BLOCK, G])),
      valid=tf.ones([B, 1, nb, BLOCK, 1]),
      ids=(PatternPair(tf.zeros([B, nb, BLOCK, 2 * RADIUS + 1], tf.int32),
                       tf.zeros([B, nb, BLOCK, G], tf.int32))
           if with_ids else PatternPair()))
  return scores, values, masks


def test_flattening_leaves_out_absent_fields_and_rebuilds_them():
  x = BranchInputs(
      scores=ScoreInputs(_normal(1, 2), PatternPair(second=_normal(2, 2))),
      values=PatternPair(_normal(3, 2), _normal(4, 2)),
      masks=BranchMasks(adders=PatternPair(_normal(5, 2), _normal(6, 2)),
                        valid=_normal(7, 2)),
      sources=(ScoreInputs(_normal(8, 2)),))
  flat = tf.nest.flatten(x)
  # No None leaf (tf.custom_gradient and tf.recompute_grad reject them),
  # in field order.
  assert [t.shape[0] for t in flat] == [1, 2, 3, 4, 5, 6, 7, 8]
  back = tf.nest.pack_sequence_as(x, [t * 2.0 for t in flat])
  assert isinstance(back, BranchInputs)
  assert back.scores.keys.first is None and back.scores.per_id is None
  assert back.seed is None and back.sums.first is None
  np.testing.assert_array_equal(back.sources[0].q, 2.0 * x.sources[0].q)
  doubled = tf.nest.map_structure(lambda t: t * 2.0, x)
  for a, b in zip(tf.nest.flatten(doubled), tf.nest.flatten(back)):
    np.testing.assert_array_equal(a, b)


def test_pattern_pair_unpacks_indexes_and_maps():
  pair = PatternPair(1, None)
  first, second = pair
  assert (first, second) == (1, None) and pair[0] == 1 and pair[1] is None
  mapped = pair.map(lambda index, v: (index, v))
  assert mapped.first == (0, 1) and mapped.second is None


def test_branch_inputs_put_the_sparse_long_branch_in_blocks():
  scores, values, masks = _long_branch()
  x = branch_inputs(True, BLOCK, (True, False), scores, values, masks,
                    sums=PatternPair(_normal(9, 9), _normal(8, 8)),
                    sources=[scores])
  nb = L // BLOCK
  assert x.scores.q.shape == [B, H, nb, BLOCK, D]
  assert x.scores.per_id.shape == [B, nb, BLOCK, R, H]
  # The band's keys and values in padded blocks (one halo block at each end);
  # l2g's stay whole.
  for band in (x.scores.keys.first, x.values.first):
    assert band.shape == [B, H, nb + 2, BLOCK, D]
    np.testing.assert_array_equal(
        band, blocking.padded_blocks(scores.keys.first, BLOCK, axis=2))
  assert x.scores.keys.second is scores.keys.second
  assert x.values.second is values.second
  # Only the carried pattern's sum and source keys are kept.
  assert x.sums.first is not None and x.sums.second is None
  (source,) = x.sources
  assert source.keys.first is not None and source.keys.second is None
  assert x.masks is masks


def test_branch_inputs_without_ids_or_carried_patterns():
  scores, values, masks = _long_branch(with_ids=False)
  x = branch_inputs(False, BLOCK, (False, False), scores, values, masks,
                    sums=PatternPair(_normal(9, 9)), sources=[scores])
  # No ids: the relative tables take no part.
  assert x.scores.per_id is None
  assert x.scores.q is scores.q
  assert x.sums.first is None and x.sources == ()


def test_chunk_cuts_say_how_each_piece_is_cut():
  scores, values, masks = _long_branch()
  x = branch_inputs(True, BLOCK, (True, True), scores, values, masks,
                    sources=[scores], seed=tf.constant([1, 2]))
  cuts = chunk_cuts(True, x)
  # One cut per tensor, in the same structure.
  assert len(tf.nest.flatten(cuts)) == len(tf.nest.flatten(x))
  for cut, value in zip(tf.nest.flatten(cuts), tf.nest.flatten(x)):
    assert isinstance(cut, ChunkInput) and cut.value is value

  def kind(c):
    return (c.kind, c.axis, c.halo, c.constant)

  for s in (cuts.scores, cuts.sources[0]):
    assert kind(s.q) == ("rows", 2, 0, False)
    assert kind(s.keys.first) == ("halo", 2, 1, False)
    assert kind(s.keys.second)[:1] == ("shared",)
    assert kind(s.per_id) == ("rows", 1, 0, False)
  assert kind(cuts.values.first) == ("halo", 2, 1, False)
  assert kind(cuts.values.second)[0] == "shared"
  assert kind(cuts.masks.adders.first) == ("rows", 2, 0, True)
  assert kind(cuts.masks.valid) == ("rows", 2, 0, True)
  assert kind(cuts.masks.ids.second) == ("rows", 1, 0, True)
  assert kind(cuts.seed) == ("shared", 2, 0, True)
  # Without the band every key and value is shared.
  dense = chunk_cuts(False, x)
  assert dense.scores.keys.first.kind == "shared"
  assert dense.values.first.kind == "shared"
