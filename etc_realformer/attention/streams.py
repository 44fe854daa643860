"""RealFormer's residual attention streams, as one layer hands them to the next.

Residual attention adds to each carried pattern's scaled scores the running
sum of every earlier layer's (`core.residual_logits`). A layer
receives the earlier layers' streams and returns them with its own in one
of two forms, chosen by `ExecutionConfig.recompute_residual_streams`:

* `SummedStreams`: per pattern, the running sum itself, a score-sized
  tensor in the pattern's layout (l2l: the blocked band on the sparse path);
* `RecomputedStreams`: every earlier layer's score inputs (queries, keys,
  per-id relative scores: [N, D]-sized, never [N, keys]); the attention core
  rebuilds the sums from them where they are read, in the order the summed
  form adds them, so both round alike.

`NO_STREAMS` is what the first layer receives, and what a layer returns
when it emits nothing (the last layer; residual attention off), in either
form. Both forms are `tf.nest` structures of tensors only (see
`pieces.NestedFields`), so they cross `tf.recompute_grad`
(gradient checkpointing, `networks/etc_model.py`) as flat tensors.
"""

import dataclasses
from typing import Optional, Tuple, Union

import tensorflow as tf

from etc_realformer.attention.pieces import NestedFields
from etc_realformer.attention.pieces import PatternPair
from etc_realformer.attention.pieces import ScoreInputs


@dataclasses.dataclass(frozen=True, eq=False)
class SummedStreams(NestedFields):
  """Per pattern, the running sum of the earlier layers' scaled scores.

  Each <float32> (or the compute dtype, `ExecutionConfig.stream_dtype`) in
  the layout of the pattern's scores (`core`'s table): l2l
  [B, H, nb, b, 3b] sparse or [B, H, L, L] full, l2g [B, H, nb, b, G] or
  [B, H, L, G], g2g [B, H, G, G], g2l [B, H, G, L]. None: not carried.
  """
  l2l: Optional[tf.Tensor] = None
  l2g: Optional[tf.Tensor] = None
  g2g: Optional[tf.Tensor] = None
  g2l: Optional[tf.Tensor] = None

  @property
  def long_branch(self) -> PatternPair[tf.Tensor]:
    """(l2l, l2g): the long queries' patterns."""
    return PatternPair(self.l2l, self.l2g)

  @property
  def global_branch(self) -> PatternPair[tf.Tensor]:
    """(g2g, g2l): the global queries' patterns."""
    return PatternPair(self.g2g, self.g2l)

  @classmethod
  def of_branches(cls, long_branch: PatternPair[tf.Tensor],
                  global_branch: PatternPair[tf.Tensor]
                  ) -> "SummedStreams":
    return cls(l2l=long_branch.first, l2g=long_branch.second,
               g2g=global_branch.first, g2l=global_branch.second)

  def is_empty(self) -> bool:
    return all(s is None for s in (self.l2l, self.l2g, self.g2g, self.g2l))


@dataclasses.dataclass(frozen=True, eq=False)
class LayerScoreInputs(NestedFields):
  """One layer's score inputs, in the layer's own layouts.

  Attributes:
    long_branch: q <T>[B, H, L, D] (pre-scaled), keys (l2l [B, H, L, D], l2g
      [B, H, G, D]), per_id <float32>[B, L, R, H] or None.
    global_branch: q [B, H, G, D], keys (g2g [B, H, G, D], g2l [B, H, L, D]),
      per_id [B, G, R, H] or None.
  """
  long_branch: ScoreInputs[tf.Tensor]
  global_branch: ScoreInputs[tf.Tensor]


@dataclasses.dataclass(frozen=True, eq=False)
class RecomputedStreams(NestedFields):
  """Every earlier layer's score inputs, first layer first."""
  sources: Tuple[LayerScoreInputs, ...] = ()

  def then(self, layer: LayerScoreInputs) -> "RecomputedStreams":
    """These streams with one more layer's score inputs."""
    return RecomputedStreams(self.sources + (layer,))


Streams = Union[SummedStreams, RecomputedStreams]

# The first layer's streams (no earlier layer), in either form.
NO_STREAMS = SummedStreams()


def as_summed(streams: Streams) -> SummedStreams:
  """`streams` read by a layer that carries the sums (`NO_STREAMS` for an
  empty `RecomputedStreams`)."""
  if isinstance(streams, SummedStreams):
    return streams
  if isinstance(streams, RecomputedStreams) and not streams.sources:
    return NO_STREAMS
  raise TypeError(f"A layer that carries summed streams got {streams!r}: "
                  "every layer must use the same stream form")


def as_recomputed(streams: Streams) -> RecomputedStreams:
  """`streams` read by a layer that recomputes the sums (an empty
  `RecomputedStreams` for `NO_STREAMS`)."""
  if isinstance(streams, RecomputedStreams):
    return streams
  if isinstance(streams, SummedStreams) and streams.is_empty():
    return RecomputedStreams()
  raise TypeError(f"A layer that recomputes its streams got {streams!r}: "
                  "every layer must use the same stream form")
