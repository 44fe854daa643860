"""Multi-hop side inputs (paragraph structure): the original's patterns on
hand-worked inputs, exemptions, linked ids, flat sequences, and graph,
tf.data and XLA runs."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.features import multihop
from etc_realformer.features import side_inputs as si
from side_inputs_testing import assert_side_inputs_equal
from side_inputs_testing import with_hard_masks

KEYS = si.SIDE_INPUT_KEYS


MH_INPUTS = dict(
    long_paragraph_breakpoints=[[0, 1, 0, 0, 0, 1, 0]],
    long_paragraph_ids=[[-1, -1, 2, 2, 2, 2, -1]],
    long_sentence_ids=[[1, 1, 3, 3, 4, 4, -1]],
    global_paragraph_breakpoints=[[1, 1, 0, 0, 1, 0]],
    local_radius=1,
    relative_pos_max_distance=1,
    ignore_hard_g2l_mask=[[1, 0, 0, 0, 0, 0]],  # CLS sees all long tokens.
    ignore_hard_l2g_mask=[[1, 0, 0, 0, 0, 0, 0]],  # q1 sees all global.
)
_REAL_G = [1, 1, 1, 1, 1, 0]
_PAD_G = [0, 0, 0, 0, 0, 1]
MH_SOFT = dict(
    # Local attention stops at the paragraph breakpoint after q2 and w4.
    l2l_att_mask=[[[0, 1, 1], [1, 1, 0], [0, 1, 1], [1, 1, 1], [1, 1, 1],
                   [1, 1, 0], [0, 1, 0]]],
    g2g_att_mask=[[_REAL_G] * 5 + [_PAD_G]],
    l2g_att_mask=[[_REAL_G] * 6 + [_PAD_G]],
    g2l_att_mask=[[[1, 1, 1, 1, 1, 1, 0]] * 5 + [[0, 0, 0, 0, 0, 0, 1]]],
    l2l_relative_att_ids=[[[2, 0, 1]] * 7],
    # 5 = 2M+3 across global paragraph segments (padding is one too).
    g2g_relative_att_ids=[[[0, 5, 5, 5, 5, 5],
                           [5, 0, 5, 5, 5, 5],
                           [5, 5, 0, 1, 1, 5],
                           [5, 5, 2, 0, 1, 5],
                           [5, 5, 2, 2, 0, 5],
                           [5, 5, 5, 5, 5, 0]]],
    # Own id 4 for the sentence token and the paragraph token.
    l2g_relative_att_ids=[[[3, 4, 3, 3, 3, 3],
                           [3, 4, 3, 3, 3, 3],
                           [3, 3, 4, 4, 3, 3],
                           [3, 3, 4, 4, 3, 3],
                           [3, 3, 4, 3, 4, 3],
                           [3, 3, 4, 3, 4, 3],
                           [3, 3, 3, 3, 3, 3]]],
)
MH_HARD_L2G = [[[1, 1, 1, 1, 1, 0],  # q1 is exempt.
                [0, 1, 0, 0, 0, 0],
                [0, 0, 1, 1, 0, 0],
                [0, 0, 1, 1, 0, 0],
                [0, 0, 1, 0, 1, 0],
                [0, 0, 1, 0, 1, 0],
                [0, 0, 0, 0, 0, 0]]]
MH_HARD_G2L = [[[1, 1, 1, 1, 1, 1, 0],  # CLS is exempt.
                [1, 1, 0, 0, 0, 0, 0],
                [0, 0, 1, 1, 1, 1, 0],
                [0, 0, 1, 1, 0, 0, 0],
                [0, 0, 0, 0, 1, 1, 0],
                [0, 0, 0, 0, 0, 0, 0]]]


@pytest.mark.parametrize("hard_g2l,hard_l2g", [(False, False), (True, False),
                                               (False, True), (True, True)])
def test_multihop(hard_g2l, hard_l2g):
  out = multihop.make_multihop_side_inputs(
      **MH_INPUTS, use_hard_g2l_mask=hard_g2l, use_hard_l2g_mask=hard_l2g)
  soft = dict(MH_SOFT, g2l_relative_att_ids=np.transpose(
      MH_SOFT["l2g_relative_att_ids"], [0, 2, 1]))
  assert_side_inputs_equal(out, with_hard_masks(
      soft, hard_g2l, hard_l2g, MH_HARD_G2L, MH_HARD_L2G))


def test_multihop_hard_without_ignore_masks():
  inputs = dict(MH_INPUTS, ignore_hard_g2l_mask=None,
                ignore_hard_l2g_mask=None)
  out = multihop.make_multihop_side_inputs(**inputs, use_hard_g2l_mask=True,
                                     use_hard_l2g_mask=True)
  hard_g2l = np.array(MH_HARD_G2L)
  hard_g2l[0, 0] = 0  # CLS links to no long token.
  hard_l2g = np.array(MH_HARD_L2G)
  hard_l2g[0, 0] = [0, 1, 0, 0, 0, 0]  # q1 sees its question token only.
  assert_side_inputs_equal(out, dict(g2l_att_mask=hard_g2l,
                                    l2g_att_mask=hard_l2g))


def test_multihop_l2g_linked_ids():
  # Link q1 to CLS and w3 to S1: only the relative ids change.
  out = multihop.make_multihop_side_inputs(
      **MH_INPUTS, use_hard_l2g_mask=True,
      l2g_linked_ids=[[0, -1, -1, -1, 3, -1, -1]])
  ids = np.array(MH_SOFT["l2g_relative_att_ids"])
  ids[0, 0, 0] = 4
  ids[0, 4, 3] = 4
  assert_side_inputs_equal(out, dict(l2g_relative_att_ids=ids,
                          g2l_relative_att_ids=np.transpose(ids, [0, 2, 1]),
                          l2g_att_mask=MH_HARD_L2G))


def test_multihop_flat_sequence():
  out = multihop.make_multihop_side_inputs(
      **MH_INPUTS, use_hard_g2l_mask=True, flat_sequence=True,
      l2g_linked_ids=[[0, -1, -1, -1, 3, -1, -1]])
  # No cross-paragraph id: 1 to the right, 2 to the left.
  ones = np.ones([6, 6], np.int32)
  g2g_ids = np.triu(ones, 1) + 2 * np.tril(ones, -1)
  # Only sentence tokens have the own id: P1's column is plain, and the
  # linked ids play no part.
  l2g_ids = np.array(MH_SOFT["l2g_relative_att_ids"])
  l2g_ids[0, :, 2] = 3
  assert_side_inputs_equal(out, dict(
      # One segment for all real tokens: local attention crosses paragraphs.
      l2l_att_mask=[[[0, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1],
                     [1, 1, 0], [0, 1, 0]]],
      g2g_att_mask=MH_SOFT["g2g_att_mask"],
      l2g_att_mask=MH_SOFT["l2g_att_mask"],
      # Sentence ids only: CLS and P1 are orphaned, the ignore mask unused.
      g2l_att_mask=[[[0, 0, 0, 0, 0, 0, 0],
                     [1, 1, 0, 0, 0, 0, 0],
                     [0, 0, 0, 0, 0, 0, 0],
                     [0, 0, 1, 1, 0, 0, 0],
                     [0, 0, 0, 0, 1, 1, 0],
                     [0, 0, 0, 0, 0, 0, 0]]],
      g2g_relative_att_ids=[g2g_ids], l2g_relative_att_ids=l2g_ids))


def test_multihop_unbatched():
  batched = multihop.make_multihop_side_inputs(**MH_INPUTS,
                                               use_hard_g2l_mask=True)
  single = multihop.make_multihop_side_inputs(
      **{k: (v[0] if isinstance(v, list) else v)
         for k, v in MH_INPUTS.items()}, use_hard_g2l_mask=True)
  for key in KEYS:
    np.testing.assert_array_equal(single[key], batched[key][0])


# --------------------------------------------------------------- fixed block
def test_jit_compile_matches_eager():
  mh = tf.function(lambda **kw: multihop.make_multihop_side_inputs(
      **kw, local_radius=1, relative_pos_max_distance=1,
      use_hard_g2l_mask=True, use_hard_l2g_mask=True), jit_compile=True)
  tensors = {k: tf.constant(v) for k, v in MH_INPUTS.items()
             if isinstance(v, list)}
  got = mh(**tensors)
  want = multihop.make_multihop_side_inputs(**MH_INPUTS, use_hard_g2l_mask=True,
                                      use_hard_l2g_mask=True)
  for key in KEYS:
    np.testing.assert_array_equal(got[key], want[key])


def test_tf_data_map_keeps_static_shapes():
  ds = tf.data.Dataset.from_tensor_slices(
      {k: v for k, v in MH_INPUTS.items() if isinstance(v, list)})
  mh = ds.map(lambda f: multihop.make_multihop_side_inputs(
      **f, local_radius=1, relative_pos_max_distance=1,
      use_hard_g2l_mask=True))
  assert mh.element_spec["l2l_att_mask"].shape == (7, 3)
  assert mh.element_spec["g2g_relative_att_ids"].shape == (6, 6)
  assert mh.element_spec["g2l_att_mask"].shape == (6, 7)


@pytest.mark.parametrize("changes,match", [
    (dict(long_sentence_ids=[[1, 1, 3, 3, 4, 6, -1]]), "long_sentence_ids"),
    (dict(long_paragraph_ids=[[-2, -1, 2, 2, 2, 2, -1]]),
     "long_paragraph_ids"),
    (dict(l2g_linked_ids=[[0, 0, 0, 0, 0, 0, 0, 0]]), "l2g_linked_ids"),
    (dict(ignore_hard_g2l_mask=[[1, 0, 0]]), "ignore_hard_g2l_mask"),
    (dict(global_paragraph_breakpoints=[1, 1, 0, 0, 1, 0]), "rank"),
    (dict(local_radius=-2), "local_radius"),
])
def test_multihop_errors(changes, match):
  kwargs = dict(MH_INPUTS)
  kwargs.update(changes)
  with pytest.raises(ValueError, match=match):
    multihop.make_multihop_side_inputs(**kwargs)
