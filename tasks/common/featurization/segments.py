"""An example's segments -> fixed-shape long/global features (`SegmentPlan`).

A featurizer lays an example out as a few segments, one after the other
(WikiHop: candidates, query, documents; HotpotQA: CLS, question, context; an
NQ window: CLS, question, the window's wordpieces). A `Segment` holds its
long tokens and the global tokens they belong to, with global indices local
to the segment. `SegmentPlan.build` places the segments in order, makes the
indices global, writes the breakpoints of the task's side-input source
(`etc_realformer.features.side_input_sources`) and fits every feature to
the long length L or the global length G. A task adds its own per-token
features as `Feature`s of its `SegmentPlan`, whose `spec` and
`model_features` name what the featurizer writes. So a task keeps its
budgets, the order of its segments and its labels.

  segment            candidates     query        documents
  long tokens        a a b b b      q q          x x x y y | z z z
  global tokens      A B            Q Q          P S S     | P S
  sentence ids       0 0 1 1 1      0 1          1 1 1 2 2   4 4 4   (local)
               ->    0 0 1 1 1      2 3          5 5 5 6 6   8 8 8   (placed)

Breakpoints: in the "multihop" source every segment closes each of its
paragraphs (runs of equal paragraph ids, the whole segment by default) on
both sides; in the "breakpoints" source (one example per row) the last real
token of each side is the one breakpoint.
"""

import collections
import dataclasses
from typing import Dict, Mapping, Optional, Sequence, Tuple, Union

import tensorflow as tf

from etc_realformer.features import feature_names
from etc_realformer.features import side_input_sources
from tasks.common.featurization import featurizing

FeatureSpec = Dict[str, Tuple[tf.DType, Tuple[Optional[int], ...]]]
# Per-token values: a tensor with one value per token, or one for all.
Values = Union[tf.Tensor, Sequence[int], int]

MULTIHOP = "multihop"
BREAKPOINTS = "breakpoints"


@dataclasses.dataclass(frozen=True)
class Feature:
  """One per-token feature of the long or the global input.

  Attributes:
    name: the feature's name.
    pad: the value of padding, and of the tokens of a segment that does not
      give the feature.
    dtype: tf.int32 or tf.int64.
    global_index: the values index global tokens (-1: none); an index the
      global input cannot hold (>= G, only when the segments overflow it)
      becomes -1.
    model_input: the model reads it (`SegmentPlan.model_features`); else it is
      bookkeeping (for decoding).
  """
  name: str
  pad: int = 0
  dtype: tf.DType = tf.int32
  global_index: bool = False
  model_input: bool = True


@dataclasses.dataclass(frozen=True)
class Segment:
  """n long tokens and the m global tokens they belong to.

  Global indices are local: 0..m-1 are the segment's own global tokens, -1
  none; `SegmentPlan.build` adds the number of global tokens before the segment.

  Attributes:
    token_ids: <int32>[n].
    global_token_ids: <int32>[m].
    sentence_ids: <int32>[n] the global token each long token belongs to.
    segment_ids: <int32>[n], or one id for all.
    global_segment_ids: <int32>[m], or one id for all.
    paragraph_ids: <int32>[n] the paragraph token of each long token
      ("multihop"); None: none (-1).
    long_paragraphs, global_paragraphs: <int32>[n] / [m] any id per token
      of its paragraph: a "multihop" breakpoint closes each run of equal
      ids. None: the segment is one paragraph.
    long_features, global_features: the values of the plan's own
      `Feature`s, by name; one not given is its pad. A `global_index`
      feature holds global indices as they are (a mention's candidate lies
      in another segment).
  """
  token_ids: Values
  global_token_ids: Values
  sentence_ids: Values
  segment_ids: Values = 0
  global_segment_ids: Values = 0
  paragraph_ids: Optional[Values] = None
  long_paragraphs: Optional[Values] = None
  global_paragraphs: Optional[Values] = None
  long_features: Mapping[str, Values] = dataclasses.field(
      default_factory=dict)
  global_features: Mapping[str, Values] = dataclasses.field(
      default_factory=dict)


def per_token(token_ids: Values, global_token_id: int,
              segment_id: Values = 0, global_segment_id: Values = 0,
              **kwargs) -> Segment:
  """A segment whose every long token has a global token of its own (a
  question's wordpieces); one paragraph.

  Args:
    token_ids: <int32>[n].
    global_token_id: the id of all n global tokens.
    segment_id, global_segment_id: the token types (one each, or per token).
    **kwargs: `Segment`'s `long_features` / `global_features`.
  """
  token_ids = tf.convert_to_tensor(token_ids, tf.int32)
  n = tf.size(token_ids, out_type=tf.int32)
  return Segment(token_ids, tf.fill([n], global_token_id), tf.range(n),
                 segment_id, global_segment_id, **kwargs)


def grouped(token_ids: Values, groups: tf.Tensor, num_groups: tf.Tensor,
            global_token_ids: Values, segment_id: Values = 0,
            global_segment_id: Values = 0, **kwargs) -> Segment:
  """A segment whose long tokens come in groups (each candidate's
  wordpieces) that share a global token each; a group is a paragraph.

  Args:
    token_ids: <int32>[n].
    groups: <int32>[n] the group of each token, 0..num_groups - 1, in
      order; group g belongs to global token g.
    num_groups: <int32>[] m (a group may have no tokens).
    global_token_ids: <int32>[m], or one id for all.
    segment_id, global_segment_id: the token types (one each, or per token).
    **kwargs: `Segment`'s `long_features` / `global_features`.
  """
  groups = tf.convert_to_tensor(groups, tf.int32)
  return Segment(token_ids, _per_token(global_token_ids, num_groups),
                 groups, segment_id, global_segment_id,
                 long_paragraphs=groups,
                 global_paragraphs=tf.range(num_groups), **kwargs)


def _per_token(values: Values, n: tf.Tensor,
               dtype: tf.DType = tf.int32) -> tf.Tensor:
  """<dtype>[n] of per-token values or of one value for all."""
  values = tf.convert_to_tensor(values)
  if values.shape.rank == 0:
    return tf.fill([n], tf.cast(values, dtype))
  return tf.cast(values, dtype)


def _breaks(paragraphs: Optional[Values], n: tf.Tensor) -> tf.Tensor:
  """<int32>[n]: 1 at the last token of each paragraph."""
  if paragraphs is None:
    paragraphs = tf.zeros([n], tf.int32)
  return featurizing.last_of_run(tf.convert_to_tensor(paragraphs, tf.int32))


def _place(local: tf.Tensor, start: tf.Tensor) -> tf.Tensor:
  """Local global indices -> the example's (-1 stays -1)."""
  return tf.where(local >= 0, local + start, -1)


@dataclasses.dataclass(frozen=True)
class SegmentPlan:
  """A task's long and global features, and how segments fill them.

  Its own features come first, named as the side-input source reads them:
  long `token_ids`, `segment_ids`, breakpoints, (multihop) paragraph ids
  and sentence ids; global `global_token_ids`, `global_segment_ids`,
  breakpoints. The task's `Feature`s follow, in order.

  Attributes:
    side_input_source: "multihop" (paragraph breakpoints and ids) or
      "breakpoints" (one example per row), as in
      `side_input_sources.SOURCE_FEATURES`.
    long_features, global_features: the task's own features.
    share_last_global: long tokens whose global token is cut off (index
      >= G), and the long padding, belong to the last global token (the
      original NQ's); else to none (-1).
  """
  side_input_source: str
  long_features: Tuple[Feature, ...] = ()
  global_features: Tuple[Feature, ...] = ()
  share_last_global: bool = False

  def __post_init__(self):
    source = self.side_input_source
    if source not in (MULTIHOP, BREAKPOINTS):
      raise ValueError(f"side_input_source {source!r} is not one of "
                       f"{(MULTIHOP, BREAKPOINTS)}")
    missing = set(side_input_sources.SOURCE_FEATURES[source]) - set(
        self.names)
    if missing:
      raise ValueError(f"a {source!r} source needs the features "
                       f"{sorted(missing)}")

  @property
  def _multihop(self) -> bool:
    return self.side_input_source == MULTIHOP

  @property
  def long_breakpoints(self) -> str:
    return (feature_names.LONG_PARAGRAPH_BREAKPOINTS if self._multihop else
            feature_names.LONG_BREAKPOINTS)

  @property
  def global_breakpoints(self) -> str:
    return (feature_names.GLOBAL_PARAGRAPH_BREAKPOINTS if self._multihop else
            feature_names.GLOBAL_BREAKPOINTS)

  @property
  def sentence_ids(self) -> str:
    return (feature_names.LONG_SENTENCE_IDS if self._multihop else
            feature_names.SENTENCE_IDS)

  @property
  def long(self) -> Tuple[Feature, ...]:
    """All long features, in order."""
    own = [Feature(feature_names.TOKEN_IDS), Feature(feature_names.SEGMENT_IDS),
           Feature(self.long_breakpoints)]
    if self._multihop:
      own.append(Feature(feature_names.LONG_PARAGRAPH_IDS, -1,
                         global_index=True))
    own.append(Feature(self.sentence_ids, -1, global_index=True))
    return tuple(own) + tuple(self.long_features)

  @property
  def global_(self) -> Tuple[Feature, ...]:
    """All global features, in order."""
    return (Feature(feature_names.GLOBAL_TOKEN_IDS),
            Feature(feature_names.GLOBAL_SEGMENT_IDS),
            Feature(self.global_breakpoints)) + tuple(self.global_features)

  @property
  def names(self) -> Tuple[str, ...]:
    """Every feature's name: long, then global."""
    return tuple(f.name for f in self.long + self.global_)

  @property
  def model_features(self) -> Tuple[str, ...]:
    """The names of the features the model reads."""
    return tuple(f.name for f in self.long + self.global_ if f.model_input)

  def spec(self, long_len: int, global_len: int) -> FeatureSpec:
    """name -> (dtype, shape): [long_len] or [global_len], unbatched."""
    spec = {f.name: (f.dtype, (long_len,)) for f in self.long}
    spec.update({f.name: (f.dtype, (global_len,)) for f in self.global_})
    return spec

  def build(self, segments: Sequence[Segment], long_len: int,
            global_len: int) -> Dict[str, tf.Tensor]:
    """The segments, in order, as fixed-shape features.

    Args:
      segments: the example's segments (graph tensors are fine: no Python
        control flow depends on their values).
      long_len: L; longer inputs are cropped, shorter ones padded.
      global_len: G; likewise.

    Returns:
      name -> <dtype>[L] or [G], in the order of `names`.
    """
    long_parts = collections.defaultdict(list)
    global_parts = collections.defaultdict(list)
    start = tf.constant(0, tf.int32)  # global tokens before the segment
    for segment in segments:
      long_values, global_values = self._values(segment, start)
      for name, values in long_values.items():
        long_parts[name].append(values)
      for name, values in global_values.items():
        global_parts[name].append(values)
      start += tf.size(global_values[feature_names.GLOBAL_TOKEN_IDS],
                       out_type=tf.int32)
    long_ = {name: tf.concat(parts, 0) for name, parts in long_parts.items()}
    global_ = {name: tf.concat(parts, 0)
               for name, parts in global_parts.items()}
    if not self._multihop:
      # One example per row: a breakpoint at the last kept token of each.
      long_[self.long_breakpoints] = _last(
          tf.size(long_[feature_names.TOKEN_IDS], out_type=tf.int32), long_len)
      global_[self.global_breakpoints] = _last(start, global_len)
    features = {}
    for feature in self.long:
      values, pad = long_[feature.name], feature.pad
      if feature.name == self.sentence_ids and self.share_last_global:
        values = tf.minimum(values, global_len - 1)
        pad = tf.minimum(start, global_len) - 1
      elif feature.global_index:
        values = tf.where(values < global_len, values, -1)
      features[feature.name] = featurizing.fit(values, long_len, pad)
    for feature in self.global_:
      values = global_[feature.name]
      if feature.global_index:
        values = tf.where(values < global_len, values, -1)
      features[feature.name] = featurizing.fit(values, global_len,
                                               feature.pad)
    return features

  def _values(self, segment: Segment, start: tf.Tensor
              ) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor]]:
    """A segment's unfitted long and global values, placed after `start`
    global tokens."""
    token_ids = tf.convert_to_tensor(segment.token_ids, tf.int32)
    global_ids = tf.convert_to_tensor(segment.global_token_ids, tf.int32)
    n = tf.size(token_ids, out_type=tf.int32)
    m = tf.size(global_ids, out_type=tf.int32)
    long_ = {feature_names.TOKEN_IDS: token_ids,
             feature_names.SEGMENT_IDS: _per_token(segment.segment_ids, n)}
    global_ = {feature_names.GLOBAL_TOKEN_IDS: global_ids,
               feature_names.GLOBAL_SEGMENT_IDS: _per_token(
                   segment.global_segment_ids, m)}
    if self._multihop:
      long_[self.long_breakpoints] = _breaks(segment.long_paragraphs, n)
      global_[self.global_breakpoints] = _breaks(segment.global_paragraphs,
                                                 m)
      paragraph_ids = (-1 if segment.paragraph_ids is None else
                       segment.paragraph_ids)
      long_[feature_names.LONG_PARAGRAPH_IDS] = _place(
          _per_token(paragraph_ids, n), start)
    long_[self.sentence_ids] = _place(
        tf.convert_to_tensor(segment.sentence_ids, tf.int32), start)
    long_.update(_own_values(self.long_features, segment.long_features, n))
    global_.update(_own_values(self.global_features,
                               segment.global_features, m))
    return long_, global_


def _own_values(features: Sequence[Feature], values: Mapping[str, Values],
                n: tf.Tensor) -> Dict[str, tf.Tensor]:
  """The n values of each of a plan's own features (its pad when the
  segment does not give it)."""
  unknown = set(values) - {f.name for f in features}
  if unknown:
    raise ValueError(f"the segment plan has no features {sorted(unknown)}")
  return {f.name: _per_token(values.get(f.name, f.pad), n, f.dtype)
          for f in features}


def _last(num_real: tf.Tensor, length: int) -> tf.Tensor:
  """<int32>[length]: 1 at the last of `num_real` tokens kept in `length`."""
  return tf.one_hot(tf.minimum(num_real, length) - 1, length,
                    dtype=tf.int32)
