"""Tests for the ETC side-input builders.

The expected arrays below were worked out by hand from the definitions in the
original ETC code (input_utils / multihop_utils), not produced by this code.
"""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.features import side_inputs as si
from side_inputs_testing import assert_side_inputs_equal
from side_inputs_testing import with_hard_masks

KEYS = si.SIDE_INPUT_KEYS


@pytest.fixture
def golden(golden_dir):
  # `golden_dir` comes from tests/conftest.py (the vector under tests/data).
  with np.load(golden_dir / "reference.npz") as data:
    return {k: data[k] for k in data.files}


# ------------------------------------------------------------ golden vector
def test_golden_vector(golden):
  out = si.make_global_local_side_inputs(
      golden["long_breakpoints"], golden["global_breakpoints"],
      golden["sentence_ids"], local_radius=4, relative_pos_max_distance=2)
  assert_side_inputs_equal(out, {k: golden[k] for k in KEYS})


def test_golden_vector_from_example_ids(golden):
  long_ids = np.cumsum(golden["long_breakpoints"][:, ::-1], -1)[:, ::-1]
  global_ids = np.cumsum(golden["global_breakpoints"][:, ::-1], -1)[:, ::-1]
  out = si.make_global_local_side_inputs_from_example_ids(
      long_ids, global_ids, golden["sentence_ids"], local_radius=4,
      relative_pos_max_distance=2)
  assert_side_inputs_equal(out, {k: golden[k] for k in KEYS})


def test_golden_vector_int64_tensors(golden):
  out = si.make_global_local_side_inputs(
      tf.constant(golden["long_breakpoints"], tf.int64),
      tf.constant(golden["global_breakpoints"], tf.int64),
      tf.constant(golden["sentence_ids"], tf.int64), 4, 2)
  assert_side_inputs_equal(out, {k: golden[k] for k in KEYS})


# ------------------------------------------------- hand-worked global-local
# L = 6 (5 tokens + 1 padding), G = 3 (2 sentences + 1 padding), r = 1, M = 1.
GL_INPUTS = dict(
    long_breakpoints=[[0, 0, 0, 0, 1, 0]],
    global_breakpoints=[[0, 1, 0]],
    sentence_ids=[[0, 0, 1, 1, 1, 0]],
    local_radius=1,
    relative_pos_max_distance=1)

GL_SOFT = dict(
    # Slot j of row i is key i - 1 + j; padding token 5 has example id 0.
    l2l_att_mask=[[[0, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0],
                   [0, 1, 0]]],
    g2g_att_mask=[[[1, 1, 0], [1, 1, 0], [0, 0, 1]]],
    l2g_att_mask=[[[1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 1, 0],
                   [0, 0, 1]]],
    g2l_att_mask=[[[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0],
                   [0, 0, 0, 0, 0, 1]]],
    # M = 1: right 1, left 2.
    l2l_relative_att_ids=[[[2, 0, 1]] * 6],
    g2g_relative_att_ids=[[[0, 1, 1], [2, 0, 1], [2, 2, 0]]],
    # 2M+1 = 3 other sentence, 2M+2 = 4 own sentence.
    l2g_relative_att_ids=[[[4, 3, 3], [4, 3, 3], [3, 4, 3], [3, 4, 3],
                           [3, 4, 3], [4, 3, 3]]],
    g2l_relative_att_ids=[[[4, 4, 3, 3, 3, 4], [3, 3, 4, 4, 4, 3],
                           [3, 3, 3, 3, 3, 3]]],
)
GL_HARD_L2G = [[[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0], [0, 1, 0],
                [0, 0, 0]]]
GL_HARD_G2L = [[[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0]]]


@pytest.mark.parametrize("hard_g2l,hard_l2g", [(False, False), (True, False),
                                               (False, True), (True, True)])
def test_global_local_hard_masks(hard_g2l, hard_l2g):
  out = si.make_global_local_side_inputs(
      **GL_INPUTS, use_hard_g2l_mask=hard_g2l, use_hard_l2g_mask=hard_l2g)
  assert_side_inputs_equal(out, with_hard_masks(
      GL_SOFT, hard_g2l, hard_l2g, GL_HARD_G2L, GL_HARD_L2G))


def test_edges_and_radius_larger_than_sequence():
  # L = 3, r = 4, M = 2: every window runs off both ends.
  out = si.make_global_local_side_inputs(
      [[0, 0, 1]], [[1]], [[0, 0, 0]], local_radius=4,
      relative_pos_max_distance=2)
  assert_side_inputs_equal(out, dict(
      l2l_att_mask=[[[0, 0, 0, 0, 1, 1, 1, 0, 0],
                     [0, 0, 0, 1, 1, 1, 0, 0, 0],
                     [0, 0, 1, 1, 1, 0, 0, 0, 0]]],
      # As in the original, out-of-range slots keep their distance id; only
      # the mask removes them.
      l2l_relative_att_ids=[[[4, 4, 4, 3, 0, 1, 2, 2, 2]] * 3],
      g2g_att_mask=[[[1]]],
      g2g_relative_att_ids=[[[0]]],
      l2g_att_mask=[[[1], [1], [1]]],
      l2g_relative_att_ids=[[[6], [6], [6]]],
      g2l_relative_att_ids=[[[6, 6, 6]]]))


def test_max_distance_larger_than_radius():
  # r = 1, M = 3: left neighbour gets M + 1 = 4; other/own = 7/8.
  out = si.make_global_local_side_inputs([[0, 1]], [[1, 0]], [[0, 1]], 1, 3)
  assert_side_inputs_equal(out, dict(
      l2l_att_mask=[[[0, 1, 1], [1, 1, 0]]],
      l2l_relative_att_ids=[[[4, 0, 1], [4, 0, 1]]],
      g2g_relative_att_ids=[[[0, 1], [4, 0]]],
      l2g_relative_att_ids=[[[8, 7], [7, 8]]]))


def test_packed_examples():
  # Two packed examples of 2 and 1 long tokens, 1 global token each.
  out = si.make_global_local_side_inputs(
      [[0, 1, 1, 0]], [[1, 1, 0]], [[0, 0, 1, 0]], 1, 1)
  assert_side_inputs_equal(out, dict(
      l2l_att_mask=[[[0, 1, 1], [1, 1, 0], [0, 1, 0], [0, 1, 0]]],
      g2g_att_mask=[[[1, 0, 0], [0, 1, 0], [0, 0, 1]]],
      l2g_att_mask=[[[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]]))


def test_no_relative_ids_when_max_distance_zero():
  out = si.make_global_local_side_inputs(**dict(
      GL_INPUTS, relative_pos_max_distance=0))
  assert set(out) == set(KEYS)
  for key in KEYS:
    assert (out[key] is None) == ("relative" in key), key
  np.testing.assert_array_equal(out["l2l_att_mask"], GL_SOFT["l2l_att_mask"])
  assert set(si.drop_none_values(out)) == {k for k in KEYS if "mask" in k}


def test_unbatched_inputs_give_unbatched_outputs(golden):
  batched = si.make_global_local_side_inputs(
      golden["long_breakpoints"], golden["global_breakpoints"],
      golden["sentence_ids"], 4, 2, use_hard_g2l_mask=True)
  single = si.make_global_local_side_inputs(
      golden["long_breakpoints"][1], golden["global_breakpoints"][1],
      golden["sentence_ids"][1], 4, 2, use_hard_g2l_mask=True)
  for key in KEYS:
    assert single[key].shape == batched[key].shape[1:]
    np.testing.assert_array_equal(single[key], batched[key][1])


# ------------------------------------------------------------------ multihop
# Global: 0 CLS, 1 question token, 2 paragraph token P1, 3 S1, 4 S2, 5 pad;
# segments {0}, {1}, {2, 3, 4}, {5 = padding}.
# Long: q1 q2 | w1 w2 (S1) w3 w4 (S2) | pad.
def test_fixed_block():
  # L = 7, 3 tokens per block -> G = 3; the third block is all padding.
  side, glob = si.make_fixed_block_side_inputs(
      [[1, 1, 1, 1, 1, 0, 0]], num_tokens_per_block=3, local_radius=2,
      relative_pos_max_distance=1, use_hard_g2l_mask=True, global_token_id=7)
  np.testing.assert_array_equal(glob["global_token_ids"], [[7, 7, 0]])
  np.testing.assert_array_equal(glob["global_input_mask"], [[1, 1, 0]])
  np.testing.assert_array_equal(glob["global_breakpoints"], [[0, 1, 0]])
  np.testing.assert_array_equal(glob["sentence_ids"], [[0, 0, 0, 1, 1, 1, 2]])
  assert_side_inputs_equal(side, dict(
      l2l_att_mask=[[[0, 0, 1, 1, 1],
                     [0, 1, 1, 1, 1],
                     [1, 1, 1, 1, 1],
                     [1, 1, 1, 1, 0],
                     [1, 1, 1, 0, 0],
                     [0, 0, 1, 1, 0],  # Padding sees padding.
                     [0, 1, 1, 0, 0]]],
      g2g_att_mask=[[[1, 1, 0], [1, 1, 0], [0, 0, 1]]],
      l2g_att_mask=[[[1, 1, 0]] * 5 + [[0, 0, 1]] * 2],
      g2l_att_mask=[[[1, 1, 1, 0, 0, 0, 0],
                     [0, 0, 0, 1, 1, 0, 0],
                     [0, 0, 0, 0, 0, 0, 1]]],
      l2l_relative_att_ids=[[[2, 2, 0, 1, 1]] * 7],
      g2g_relative_att_ids=[[[0, 1, 1], [2, 0, 1], [2, 2, 0]]],
      l2g_relative_att_ids=[[[4, 3, 3]] * 3 + [[3, 4, 3]] * 3 + [[3, 3, 4]]],
  ))


def test_fixed_block_unbatched_and_exact_blocks():
  side, glob = si.make_fixed_block_side_inputs([1, 1, 1, 1], 2, 1, 0)
  np.testing.assert_array_equal(glob["global_token_ids"], [1, 1])
  np.testing.assert_array_equal(glob["global_breakpoints"], [0, 1])
  assert side["l2l_att_mask"].shape == (4, 3)
  assert side["l2l_relative_att_ids"] is None


# ----------------------------------------------- graph, tf.data and XLA runs
def _golden_call(golden, **kwargs):
  return lambda lb, gb, s: si.make_global_local_side_inputs(
      lb, gb, s, 4, 2, **kwargs)


def test_tf_data_map_keeps_static_shapes(golden):
  ds = tf.data.Dataset.from_tensor_slices(
      (golden["long_breakpoints"], golden["global_breakpoints"],
       golden["sentence_ids"]))
  per_example = ds.map(_golden_call(golden))
  spec = per_example.element_spec
  assert spec["l2l_att_mask"].shape == (64, 9)
  assert spec["g2g_relative_att_ids"].shape == (8, 8)
  assert spec["l2g_att_mask"].shape == (64, 8)
  assert spec["g2l_relative_att_ids"].shape == (8, 64)
  batched = next(iter(per_example.batch(2)))
  assert_side_inputs_equal(batched, {k: golden[k] for k in KEYS})

  batch_first = ds.batch(2, drop_remainder=True).map(_golden_call(golden))
  assert batch_first.element_spec["g2l_att_mask"].shape == (2, 8, 64)
  assert_side_inputs_equal(next(iter(batch_first)),
                           {k: golden[k] for k in KEYS})


def test_jit_compile_matches_eager(golden):
  args = (golden["long_breakpoints"], golden["global_breakpoints"],
          golden["sentence_ids"])
  fn = tf.function(_golden_call(golden, use_hard_l2g_mask=True),
                   jit_compile=True)
  eager = _golden_call(golden, use_hard_l2g_mask=True)(*args)
  compiled = fn(*[tf.constant(a) for a in args])
  for key in KEYS:
    np.testing.assert_array_equal(compiled[key], eager[key])

  fb = tf.function(lambda m: si.make_fixed_block_side_inputs(m, 3, 2, 1),
                   jit_compile=True)
  mask = [[1, 1, 1, 1, 1, 0, 0]]
  got_side, got_glob = fb(tf.constant(mask))
  want_side, want_glob = si.make_fixed_block_side_inputs(mask, 3, 2, 1)
  for key in KEYS:
    np.testing.assert_array_equal(got_side[key], want_side[key])
  for key in want_glob:
    np.testing.assert_array_equal(got_glob[key], want_glob[key])


def test_dynamic_shapes(golden):
  spec = tf.TensorSpec([None, None], tf.int32)
  fn = tf.function(_golden_call(golden), input_signature=[spec] * 3)
  out = fn(golden["long_breakpoints"], golden["global_breakpoints"],
           golden["sentence_ids"])
  assert_side_inputs_equal(out, {k: golden[k] for k in KEYS})

  fb = tf.function(lambda m: si.make_fixed_block_side_inputs(m, 3, 2, 1),
                   input_signature=[spec])
  side, glob = fb(tf.constant([[1, 1, 1, 1, 1, 0, 0]]))
  np.testing.assert_array_equal(glob["global_token_ids"], [[1, 1, 0]])
  np.testing.assert_array_equal(side["g2l_att_mask"][0, 2],
                                [0, 0, 0, 0, 0, 1, 1])


# --------------------------------------------------------------- bad inputs
def _gl(**changes):
  kwargs = dict(GL_INPUTS)
  kwargs.update(changes)
  return si.make_global_local_side_inputs(**kwargs)


@pytest.mark.parametrize("changes,match", [
    (dict(long_breakpoints=[[[0, 0, 0, 0, 1, 0]]]), "long_breakpoints"),
    (dict(sentence_ids=[0, 0, 1, 1, 1, 0]), "rank"),
    (dict(global_breakpoints=[[0, 1, 0], [0, 1, 0]]), "batch size"),
    (dict(sentence_ids=[[0, 0, 1, 1, 1]]), "long length"),
    (dict(local_radius=0), "local_radius"),
    (dict(local_radius=1.0), "local_radius"),
    (dict(relative_pos_max_distance=-1), "relative_pos_max_distance"),
    (dict(sentence_ids=[[0, 0, 1, 3, 1, 0]]), "sentence_ids"),
    (dict(sentence_ids=[[0, -1, 1, 1, 1, 0]]), "sentence_ids"),
    (dict(sentence_ids=[[0.0, 0, 1, 1, 1, 0]]), "sentence_ids"),
    (dict(long_breakpoints=[[0, 0, 0, 0, 2, 0]]), "long_breakpoints"),
])
def test_global_local_errors(changes, match):
  with pytest.raises(ValueError, match=match):
    _gl(**changes)


def test_padding_may_have_any_sentence_id():
  out = _gl(sentence_ids=[[0, 0, 1, 1, 1, 99]])
  np.testing.assert_array_equal(out["l2g_att_mask"], GL_SOFT["l2g_att_mask"])


def test_from_example_ids_errors():
  with pytest.raises(ValueError, match="global_example_ids"):
    si.make_global_local_side_inputs_from_example_ids(
        [[1, 1]], [[[1]]], [[0, 0]], 1, 1)
  with pytest.raises(ValueError, match="sentence_ids"):
    si.make_global_local_side_inputs_from_example_ids(
        [[1, 1]], [[1]], [[0, 1]], 1, 1)


@pytest.mark.parametrize("args,match", [
    (([[1, 1, 0]], 0, 1, 1), "num_tokens_per_block"),
    (([[[1, 1, 0]]], 2, 1, 1), "input_mask"),
    (([[1, 1, 0]], 2, 0, 1), "local_radius"),
    (([[1, 1, 0]], 2, 1, -3), "relative_pos_max_distance"),
])
def test_fixed_block_errors(args, match):
  with pytest.raises(ValueError, match=match):
    si.make_fixed_block_side_inputs(*args)


def test_tf_data_fixed_block_static_shapes():
  fb = tf.data.Dataset.from_tensor_slices([[1, 1, 1, 1, 1, 0, 0]]).map(
      lambda m: si.make_fixed_block_side_inputs(m, 3, 2, 1))
  side_spec, glob_spec = fb.element_spec
  assert side_spec["l2g_att_mask"].shape == (7, 3)
  assert glob_spec["global_token_ids"].shape == (3,)
  assert glob_spec["sentence_ids"].shape == (7,)


def test_range_check_inside_tf_function_with_numpy_inputs():
  fn = tf.function(lambda: si.make_global_local_side_inputs(
      np.array([[0, 1, 0]]), np.array([[1, 0]]), np.array([[0, 2, 0]]), 1, 1))
  with pytest.raises(ValueError, match="sentence_ids"):
    fn()
