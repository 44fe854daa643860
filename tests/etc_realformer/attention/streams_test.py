"""RealFormer's streams between layers: the two forms, how a layer reads
them, and that both cross `tf.recompute_grad` as flat tensors."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.attention.pieces import PatternPair
from etc_realformer.attention.pieces import ScoreInputs
from etc_realformer.attention.streams import as_recomputed
from etc_realformer.attention.streams import as_summed
from etc_realformer.attention.streams import LayerScoreInputs
from etc_realformer.attention.streams import NO_STREAMS
from etc_realformer.attention.streams import RecomputedStreams
from etc_realformer.attention.streams import SummedStreams


def _constant(value, shape=(2, 3)):
  return tf.fill(shape, float(value))


def _layer(per_id=True) -> LayerScoreInputs:
  def branch(base):
    return ScoreInputs(_constant(base), PatternPair(_constant(base + 1),
                                                    _constant(base + 2)),
                       _constant(base + 3) if per_id else None)
  return LayerScoreInputs(branch(0), branch(10))


def test_summed_streams_by_branch():
  l2l, g2l = _constant(1), _constant(2)
  streams = SummedStreams.of_branches(PatternPair(l2l, None),
                                      PatternPair(None, g2l))
  assert streams.l2l is l2l and streams.g2l is g2l
  assert streams.l2g is None and streams.g2g is None
  assert tuple(streams.long_branch) == (l2l, None)
  assert tuple(streams.global_branch) == (None, g2l)
  assert not streams.is_empty() and NO_STREAMS.is_empty()


def test_recomputed_streams_grow_by_one_layer():
  first, second = _layer(), _layer()
  streams = RecomputedStreams().then(first).then(second)
  assert streams.sources == (first, second)


def test_the_first_layer_reads_no_streams_in_either_form():
  assert as_summed(NO_STREAMS) is NO_STREAMS
  assert as_summed(RecomputedStreams()) is NO_STREAMS
  assert as_recomputed(NO_STREAMS).sources == ()
  recomputed = RecomputedStreams((_layer(),))
  assert as_recomputed(recomputed) is recomputed


def test_mixing_the_forms_fails():
  with pytest.raises(TypeError, match="same stream form"):
    as_summed(RecomputedStreams((_layer(),)))
  with pytest.raises(TypeError, match="same stream form"):
    as_recomputed(SummedStreams(l2l=_constant(1)))


@pytest.mark.parametrize("streams", [
    NO_STREAMS,
    SummedStreams(l2l=_constant(1), g2l=_constant(2)),
    RecomputedStreams((_layer(per_id=False), _layer())),
])
def test_streams_cross_recompute_grad_flat(streams):
  # As `etc_model._recomputed_chunk` passes them: no None leaf reaches
  # tf.recompute_grad (it rejects them), and they come back whole.
  x = tf.constant(3.0)

  @tf.recompute_grad
  def run(scale, *values):
    current = tf.nest.pack_sequence_as(streams, list(values))
    doubled = tf.nest.map_structure(lambda t: t * scale, current)
    return (scale,) + tuple(tf.nest.flatten(doubled))

  flat = tf.nest.flatten(streams)
  assert all(v is not None for v in flat)
  with tf.GradientTape() as tape:
    tape.watch(x)
    out = run(x, *flat)
    total = tf.add_n([tf.reduce_sum(t) for t in out])
  back = tf.nest.pack_sequence_as(streams, list(out[1:]))
  assert type(back) is type(streams)
  for got, value in zip(tf.nest.flatten(back), flat):
    np.testing.assert_array_equal(got, 3.0 * value.numpy())
  expected = 1.0 + sum(float(tf.reduce_sum(v)) for v in flat)
  assert tape.gradient(total, x).numpy() == pytest.approx(expected)
