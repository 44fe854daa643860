"""Tests for tasks.common.featurization.segments: segments -> fitted long/global
features."""

import pytest
import tensorflow as tf

from etc_realformer.features import feature_names
from etc_realformer.features import side_input_sources
from tasks.common.featurization import segments

LINK, KIND, BYTES = "link", "kind", "bytes"

MULTIHOP = segments.SegmentPlan(
    segments.MULTIHOP,
    long_features=(segments.Feature(LINK, -1, global_index=True),),
    global_features=(segments.Feature(feature_names.IGNORE_HARD_G2L_MASK),
                     segments.Feature(KIND, 9)))


def _segments():
  """Candidates-like (two groups), query-like (a token each), documents-like
  (a paragraph token and two sentence tokens)."""
  return [
      segments.grouped([11, 12, 13], [0, 0, 1], 2, 7, segment_id=4,
                       global_segment_id=6, long_features={LINK: [0, 0, 1]},
                       global_features={feature_names.IGNORE_HARD_G2L_MASK: 1}),
      segments.per_token([21, 22], 8, segment_id=3, global_segment_id=5),
      segments.Segment(token_ids=[31, 32, 33], global_token_ids=[9, 1, 1],
                       sentence_ids=[1, 1, 2], segment_ids=1,
                       global_segment_ids=[7, 0, 0], paragraph_ids=0,
                       global_features={KIND: [2, 3, 3]}),
  ]


def _numpy(features):
  return {k: v.numpy().tolist() for k, v in features.items()}


def test_multihop_places_the_segments_and_pads():
  got = _numpy(MULTIHOP.build(_segments(), 10, 8))
  assert list(got) == list(MULTIHOP.names)
  assert got == {
      "token_ids": [11, 12, 13, 21, 22, 31, 32, 33, 0, 0],
      "segment_ids": [4, 4, 4, 3, 3, 1, 1, 1, 0, 0],
      # Each group / segment closes its paragraph.
      "long_paragraph_breakpoints": [0, 1, 1, 0, 1, 0, 0, 1, 0, 0],
      # Local 0 of the third segment: after 2 + 2 global tokens.
      "long_paragraph_ids": [-1, -1, -1, -1, -1, 4, 4, 4, -1, -1],
      "long_sentence_ids": [0, 0, 1, 2, 3, 5, 5, 6, -1, -1],
      LINK: [0, 0, 1, -1, -1, -1, -1, -1, -1, -1],
      "global_token_ids": [7, 7, 8, 8, 9, 1, 1, 0],
      "global_segment_ids": [6, 6, 5, 5, 7, 0, 0, 0],
      "global_paragraph_breakpoints": [1, 1, 0, 1, 0, 0, 1, 0],
      "ignore_hard_g2l_mask": [1, 1, 0, 0, 0, 0, 0, 0],
      KIND: [9, 9, 9, 9, 2, 3, 3, 9],
  }


def test_truncation_crops_and_drops_indices_past_the_global_input():
  got = _numpy(MULTIHOP.build(_segments(), 6, 5))
  assert got["token_ids"] == [11, 12, 13, 21, 22, 31]
  # Global token 5 was cropped: the long token belongs to none.
  assert got["long_sentence_ids"] == [0, 0, 1, 2, 3, -1]
  assert got["long_paragraph_ids"] == [-1, -1, -1, -1, -1, 4]
  assert got["global_token_ids"] == [7, 7, 8, 8, 9]
  assert got["global_paragraph_breakpoints"] == [1, 1, 0, 1, 0]


def _window():
  """[CLS], two question tokens, then runs over [SEP] 7 8 8 [SEP]."""
  return [
      segments.Segment([101], [1], sentence_ids=[0]),
      segments.per_token([5, 6], 2),
      segments.grouped([102, 7, 8, 8, 102], [0, 1, 2, 2, 3], 4, [2, 3, 3, 4],
                       long_features={BYTES: [-1, 70, 80, 81, -1]}),
  ]


def test_breakpoints_plan_sharing_the_last_global_token():
  shared = segments.SegmentPlan(
      segments.BREAKPOINTS, share_last_global=True,
      long_features=(segments.Feature(BYTES, -1, tf.int64,
                                      model_input=False),))
  got = shared.build(_window(), 12, 6)
  assert got[BYTES].dtype == tf.int64
  got = _numpy(got)
  assert got["token_ids"] == [101, 5, 6, 102, 7, 8, 8, 102, 0, 0, 0, 0]
  # One example per row: one breakpoint at each side's last kept token.
  assert got["long_breakpoints"] == [0] * 7 + [1, 0, 0, 0, 0]
  assert got["global_breakpoints"] == [0, 0, 0, 0, 0, 1]
  # 7 global tokens, 6 kept: the last run and the padding share token 5.
  assert got["global_token_ids"] == [1, 2, 2, 2, 3, 3]
  assert got["sentence_ids"] == [0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 5]
  assert got[BYTES] == [-1, -1, -1, -1, 70, 80, 81, -1, -1, -1, -1, -1]
  assert got["segment_ids"] == [0] * 12
  assert got["global_segment_ids"] == [0] * 6
  # Room for every global token: the padding shares the last real one.
  got = _numpy(shared.build(_window(), 10, 9))
  assert got["sentence_ids"] == [0, 1, 2, 3, 4, 5, 5, 6, 6, 6]
  assert got["global_breakpoints"] == [0] * 6 + [1, 0, 0]


def test_breakpoints_plan_without_sharing_drops_indices():
  plain = segments.SegmentPlan(segments.BREAKPOINTS)
  got = _numpy(plain.build(_window()[:2], 5, 2))
  assert got["sentence_ids"] == [0, 1, -1, -1, -1]
  assert got["global_breakpoints"] == [0, 1]
  assert got["long_breakpoints"] == [0, 0, 1, 0, 0]


def test_spec_and_model_features():
  bookkept = segments.SegmentPlan(
      segments.BREAKPOINTS,
      long_features=(segments.Feature(BYTES, -1, tf.int64,
                                      model_input=False),),
      global_features=(segments.Feature(KIND),))
  assert bookkept.spec(16, 4) == {
      "token_ids": (tf.int32, (16,)),
      "segment_ids": (tf.int32, (16,)),
      "long_breakpoints": (tf.int32, (16,)),
      "sentence_ids": (tf.int32, (16,)),
      BYTES: (tf.int64, (16,)),
      "global_token_ids": (tf.int32, (4,)),
      "global_segment_ids": (tf.int32, (4,)),
      "global_breakpoints": (tf.int32, (4,)),
      KIND: (tf.int32, (4,)),
  }
  assert bookkept.model_features == (
      "token_ids", "segment_ids", "long_breakpoints", "sentence_ids",
      "global_token_ids", "global_segment_ids", "global_breakpoints", KIND)
  # What the side inputs read is among them.
  for lay in (bookkept, MULTIHOP):
    needed = side_input_sources.SOURCE_FEATURES[lay.side_input_source]
    assert set(needed) <= set(
        lay.model_features)


def test_traced_with_unknown_lengths_gives_static_shapes():
  @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
  def traced(query):
    features = MULTIHOP.build(
        [segments.per_token(query, 8, segment_id=3)], 6, 4)
    for name, (dtype, shape) in MULTIHOP.spec(6, 4).items():
      assert features[name].dtype == dtype
      assert features[name].shape.as_list() == list(shape)
    return features

  got = _numpy(traced(tf.constant([4, 5, 6], tf.int32)))
  assert got["long_sentence_ids"] == [0, 1, 2, -1, -1, -1]
  assert got["global_paragraph_breakpoints"] == [0, 0, 1, 0]
  got = _numpy(traced(tf.constant([], tf.int32)))
  assert got["token_ids"] == [0] * 6 and got["global_token_ids"] == [0] * 4


def test_bad_plans_and_segments_fail():
  with pytest.raises(ValueError, match="input_masks"):
    segments.SegmentPlan("input_masks")
  with pytest.raises(ValueError, match="ignore_hard_g2l_mask"):
    segments.SegmentPlan(segments.MULTIHOP)
  with pytest.raises(ValueError, match="no features.*'nope'"):
    MULTIHOP.build([segments.per_token([1], 2, long_features={"nope": 1})],
                   4, 4)


def test_names_follow_the_side_input_source():
  assert segments.SegmentPlan(segments.BREAKPOINTS).names == (
      "token_ids", "segment_ids", "long_breakpoints", "sentence_ids",
      "global_token_ids", "global_segment_ids", "global_breakpoints")
  assert MULTIHOP.names[:5] == (
      "token_ids", "segment_ids", "long_paragraph_breakpoints",
      "long_paragraph_ids", "long_sentence_ids")
