"""The typed pieces of one branch of the attention core.

One ETC layer attends on two branches, each with two patterns that share
a softmax (`etc_realformer.attention.core`): the long branch (l2l,
l2g) and the global branch (g2g, g2l). What the core reads and returns for a
branch are the frozen dataclasses below, written once for both branches:
`PatternPair` holds one thing per pattern of the branch (`first`: l2l or g2g,
`second`: l2g or g2l).

  BranchInputs                     what `core.attend_branch` reads
    scores   ScoreInputs            this layer's q, keys per pattern, per_id
    values   PatternPair            values per pattern
    masks    BranchMasks            adders and relative ids per pattern, valid
    sums     PatternPair            summed streams: earlier layers' sums
    sources  (ScoreInputs, ...)     recomputed streams: earlier layers' inputs
    seed                            the call's dropout seed
  BranchOutputs                    what it returns
    ctx, sums (new running sums), probs (before dropout)

Every field is a tensor in the layouts of the core's table (module
docstring of `core`), except in a chunk-cut description
(`chunk_cuts`), where each is the `chunking.ChunkInput` that says how
chunks of rows cut it. A field that is None is absent (no relative term,
a pattern not carried, no dropout seed).

How they pass through `tf.nest`: the strategies hand the pieces to
`chunking.chunked_recompute`, and the RealFormer streams built from them
(`streams`) cross `tf.recompute_grad` (gradient checkpointing), both
of which see only `tf.nest.flatten`'s leaves, and `tf.custom_gradient`
rejects a None leaf. A NamedTuple keeps its None fields as leaves; a plain
dataclass is one opaque leaf. So the pieces are dataclasses that implement
tf.nest's custom nest protocol (`NestedFields`): they flatten to the tensors
of their set fields, in field order, and `tf.nest.pack_sequence_as` /
`map_structure` rebuild them with the same fields set.
"""

import dataclasses
from typing import (Any, Callable, Generic, Iterator, Optional, Sequence,
                    Tuple, TypeVar)

import tensorflow as tf

from etc_realformer.attention import blocking
from etc_realformer.attention.chunking import ChunkInput

T = TypeVar("T")  # tf.Tensor; chunking.ChunkInput in a chunk-cut description
U = TypeVar("U")


class NestedFields:
  """tf.nest's custom nest protocol for the frozen dataclasses below.

  The components are the fields that are not None, in field order (the
  metadata is their names); `__tf_unflatten__` leaves the others at their
  default (None or an empty pair). Fields may hold nests themselves
  (pairs, tuples of pieces): tf.nest flattens them in turn.
  """

  def __tf_flatten__(self) -> Tuple[Tuple[str, ...], Tuple[Any, ...]]:
    names = tuple(f.name for f in dataclasses.fields(self)
                  if getattr(self, f.name) is not None)
    return names, tuple(getattr(self, name) for name in names)

  @classmethod
  def __tf_unflatten__(cls, names: Tuple[str, ...],
                       components: Sequence[Any]) -> Any:
    return cls(**dict(zip(names, components)))


@dataclasses.dataclass(frozen=True, eq=False)
class PatternPair(NestedFields, Generic[T]):
  """One value per pattern of a branch, in `BranchSpec.patterns` order.

  `first` is the branch's own keys' pattern (l2l, g2g), `second` the other
  branch's (l2g, g2l); None where absent. Unpacks and indexes as a pair.
  """
  first: Optional[T] = None
  second: Optional[T] = None

  def __iter__(self) -> Iterator[Optional[T]]:
    return iter((self.first, self.second))

  def __getitem__(self, index: int) -> Optional[T]:
    return (self.first, self.second)[index]

  def map(self, fn: Callable[[int, T], U]) -> "PatternPair[U]":
    """`fn(index, value)` of every set value (None stays None)."""
    return PatternPair(*(None if v is None else fn(i, v)
                         for i, v in enumerate(self)))


@dataclasses.dataclass(frozen=True, eq=False)
class ScoreInputs(NestedFields, Generic[T]):
  """One layer's inputs to a branch's scores (q.k + q.e[id] + bias[id]).

  Attributes:
    q: the pre-scaled queries <T>[B, H, N, D]; in a branch's pieces on the
      sparse long branch, query blocks [B, H, nb, b, D].
    keys: per pattern <T>[B, H, K, D]; the l2l band's in the sparse pieces,
      padded key blocks [B, H, nb + 2, b, D] (a halo block at each end).
      None: not wanted (an earlier layer's pattern that is not carried).
    per_id: <float32>[B, N, R, H] relative scores per id
      (`relative_table.scores_per_id`; [B, nb, b, R, H] in sparse long
      pieces); None: no relative term.
  """
  q: T
  keys: PatternPair[T] = PatternPair()
  per_id: Optional[T] = None


@dataclasses.dataclass(frozen=True, eq=False)
class BranchMasks(NestedFields, Generic[T]):
  """A branch's masks in its layout (`masks.PreparedSideInputs`).

  Attributes:
    adders: per pattern <float32>[B, 1, n, (b,) K]: 0 or -10000.
    valid: <float32>[B, 1, n, (b,) 1]: 1 where a query has a key.
    ids: per pattern <int32>[B, n, (b,) K] relative ids (l2l sparse: the
      window [B, nb, b, 2r+1]); None: no relative term for the pattern.
  """
  adders: PatternPair[T]
  valid: T
  ids: PatternPair[T] = PatternPair()


@dataclasses.dataclass(frozen=True, eq=False)
class BranchInputs(NestedFields, Generic[T]):
  """Everything `core.attend_branch` reads for (a chunk of) a branch.

  Attributes:
    scores: this layer's score inputs.
    values: per pattern <T>[B, H, K, D] (l2l sparse: padded value blocks
      [B, H, nb + 2, b, D]).
    masks: the branch's masks.
    sums: summed streams: the earlier layers' running sums of the carried
      patterns, in the patterns' score layouts (None: not carried, or the
      first layer).
    sources: recomputed streams: every earlier layer's score inputs (keys
      of the carried patterns only), from which the core rebuilds `sums`.
      At most one of `sums` and `sources` is set.
    seed: <int32>[2] the call's dropout seed (None: no dropout).
  """
  scores: ScoreInputs[T]
  values: PatternPair[T]
  masks: BranchMasks[T]
  sums: PatternPair[T] = PatternPair()
  sources: Tuple[ScoreInputs[T], ...] = ()
  seed: Optional[T] = None


@dataclasses.dataclass(frozen=True, eq=False)
class BranchOutputs(NestedFields, Generic[T]):
  """What `core.attend_branch` returns for (a chunk of) a branch.

  Attributes:
    ctx: <T>[B, H, n, (b,) D] the attention output per head.
    sums: the new running sums of the carried patterns (with
      `BranchSpec.streams.emit`), <float32> or the compute dtype
      (`StreamSpec.low_precision`).
    probs: with `BranchSpec.return_probs`, the <float32> probabilities per
      pattern before dropout, in the branch's layout.
  """
  ctx: T
  sums: PatternPair[T] = PatternPair()
  probs: Optional[PatternPair[T]] = None


# ------------------------------------------------------------ the builders
def branch_inputs(band: bool, block_len: int, carried: Tuple[bool, bool],
                  scores: ScoreInputs[tf.Tensor],
                  values: PatternPair[tf.Tensor],
                  masks: BranchMasks[tf.Tensor],
                  sums: PatternPair[tf.Tensor] = PatternPair(),
                  sources: Sequence[ScoreInputs[tf.Tensor]] = (),
                  seed: Optional[tf.Tensor] = None
                  ) -> BranchInputs[tf.Tensor]:
  """A branch's pieces in the core's layouts, from the layer's tensors.

  Args:
    band: the branch's first pattern is the l2l band in the blocked layout
      (`BranchSpec.band`, the sparse long branch).
    block_len: b = r + 1.
    carried: per pattern, whether RealFormer carries its scores.
    scores: this layer's q [B, H, N, D] (pre-scaled), keys [B, H, K, D]
      and per_id [B, N, R, H] (or None).
    values: [B, H, K, D] per pattern.
    masks: the branch's masks (already in the branch's layout).
    sums: summed streams (kept for the carried patterns).
    sources: recomputed streams: the earlier layers' score inputs, in the
      layouts of `scores` (used when a pattern is carried).
    seed: the call's dropout seed.

  Returns:
    The `BranchInputs`. Without relative ids the per-id scores are left out
    (the tables then take no part and get no gradient).
  """
  has_ids = any(ids is not None for ids in masks.ids)

  def layout(s: ScoreInputs[tf.Tensor], wanted: Tuple[bool, bool]
             ) -> ScoreInputs[tf.Tensor]:
    q, per_id = s.q, s.per_id if has_ids else None
    if band:  # [B, H, L, D] -> query blocks [B, H, nb, b, D].
      q = blocking.split_into_blocks(q, block_len, axis=2)
      if per_id is not None:  # [B, L, R, H] -> [B, nb, b, R, H]
        per_id = blocking.split_into_blocks(per_id, block_len, axis=1)
    keys = PatternPair(*(k if w else None for k, w in zip(s.keys, wanted)))
    return ScoreInputs(q, keys.map(band_blocks), per_id)

  def band_blocks(index: int, x: tf.Tensor) -> tf.Tensor:
    """Keys or values of the l2l band: padded blocks (a halo at each end)."""
    if band and index == 0:
      return blocking.padded_blocks(x, block_len, axis=2)
    return x

  branch_sources = (tuple(layout(s, carried) for s in sources)
                    if any(carried) else ())
  return BranchInputs(
      scores=layout(scores, (True, True)),
      values=values.map(band_blocks),
      masks=masks,
      sums=PatternPair(*(s if c else None for s, c in zip(sums, carried))),
      sources=branch_sources,
      seed=seed)


def chunk_cuts(band: bool, x: BranchInputs[tf.Tensor]
               ) -> BranchInputs[ChunkInput]:
  """How `chunking.chunked_recompute` cuts each piece into chunks of rows.

  Rows are axis 2 of the per-head pieces (query blocks on the sparse long
  branch) and axis 1 of the per-id scores and the ids. The band's padded key
  and value blocks are cut with a halo of one block; other keys and values,
  and the seed, are shared by every chunk. Masks and the seed are constants
  (no gradient).
  """

  def keys(index: int, k: tf.Tensor) -> ChunkInput:
    if band and index == 0:
      return ChunkInput(k, "halo", axis=2, halo=1)
    return ChunkInput(k, "shared")

  def score_cuts(s: ScoreInputs[tf.Tensor]) -> ScoreInputs[ChunkInput]:
    return ScoreInputs(
        ChunkInput(s.q), s.keys.map(keys),
        None if s.per_id is None else ChunkInput(s.per_id, axis=1))

  m = x.masks
  return BranchInputs(
      scores=score_cuts(x.scores),
      values=x.values.map(keys),
      masks=BranchMasks(
          adders=m.adders.map(lambda _, a: ChunkInput(a, constant=True)),
          valid=ChunkInput(m.valid, constant=True),
          ids=m.ids.map(lambda _, i: ChunkInput(i, axis=1, constant=True))),
      sums=x.sums.map(lambda _, s: ChunkInput(s)),
      sources=tuple(score_cuts(s) for s in x.sources),
      seed=(None if x.seed is None
            else ChunkInput(x.seed, "shared", constant=True)))
