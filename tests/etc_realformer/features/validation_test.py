"""The side-input builders' argument checks
(`etc_realformer/features/validation.py`): every error names the argument."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.features import validation as v


def test_check_int():
  assert v.check_int("local_radius", np.int64(3), 1) == 3
  assert type(v.check_int("local_radius", np.int64(3), 1)) is int
  # bool is an int to Python, never a radius.
  for bad in (True, 2.0, "2", None):
    with pytest.raises(ValueError, match="local_radius must be a Python int"):
      v.check_int("local_radius", bad, 1)
  with pytest.raises(ValueError, match=r"local_radius must be >= 1, got 0"):
    v.check_int("local_radius", 0, 1)


def test_check_radius_and_distance():
  assert v.check_radius_and_distance(2, 0) == (2, 0)
  with pytest.raises(ValueError, match="local_radius"):
    v.check_radius_and_distance(0, 3)
  with pytest.raises(ValueError, match="relative_pos_max_distance"):
    v.check_radius_and_distance(2, -1)


def test_to_int32():
  out = v.to_int32("sentence_ids", np.array([True, False]))
  assert out.dtype == tf.int32 and out.numpy().tolist() == [1, 0]
  assert v.to_int32("sentence_ids", tf.constant([7], tf.int64)).dtype == (
      tf.int32)
  with pytest.raises(ValueError, match="sentence_ids must have an integer "
                     "dtype, got <dtype: 'float32'>"):
    v.to_int32("sentence_ids", np.zeros([2], np.float32))
  with pytest.raises(ValueError, match="sentence_ids must have an integer"):
    v.to_int32("sentence_ids", ["a", "b"])
  with pytest.raises(ValueError, match="sentence_ids: cannot convert"):
    v.to_int32("sentence_ids", [[1, 2], [3]])


def test_prepare_batched_and_unbatched():
  tensors, unbatched = v.prepare(
      {"long_breakpoints": [0, 0, 1], "sentence_ids": None},
      {"global_breakpoints": np.array([0, 1], np.int64)})
  assert unbatched
  assert sorted(tensors) == ["global_breakpoints", "long_breakpoints"]
  assert tensors["long_breakpoints"].shape == (1, 3)
  assert tensors["global_breakpoints"].dtype == tf.int32
  np.testing.assert_array_equal(tensors["global_breakpoints"], [[0, 1]])
  tensors, unbatched = v.prepare({"a": np.zeros([2, 3], np.int32)},
                                 {"b": np.zeros([2, 5], np.int32)})
  assert not unbatched and tensors["b"].shape == (2, 5)


@pytest.mark.parametrize("long_args,global_args,message", [
    ({"a": np.zeros([1, 2, 3], np.int32)}, {},
     r"a must have rank 2 \[batch, length\] or rank 1 \[length\], got shape "
     r"\(1, 2, 3\)"),
    ({"a": [0, 1]}, {"b": [[0, 1]]},
     "b has rank 2 but a has rank 1: pass all inputs batched or all "
     "unbatched"),
    ({"a": [[0, 1], [1, 0]]}, {"b": [[0, 1]]},
     "b has batch size 1 but a has batch size 2"),
    ({"a": [[0, 1]], "c": [[0, 1, 1]]}, {},
     "c has long length 3 but a has long length 2"),
    ({"a": [[0, 1]]}, {"b": [[0, 1]], "d": [[1]]},
     "d has global length 1 but b has global length 2"),
])
def test_prepare_errors_name_the_arguments(long_args, global_args, message):
  with pytest.raises(ValueError, match=message):
    v.prepare(long_args, global_args)


def test_prepare_skips_unknown_lengths_in_a_graph():
  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
  def fn(a):
    tensors, _ = v.prepare({"a": a, "c": tf.zeros([2, 4], tf.int32)}, {})
    return tensors["a"]

  assert fn(tf.zeros([2, 3], tf.int32)).shape == (2, 3)


def test_static_values():
  np.testing.assert_array_equal(v.static_values(tf.constant([1, 2])), [1, 2])

  @tf.function(input_signature=[tf.TensorSpec([2], tf.int32)])
  def fn(x):
    assert v.static_values(x) is None
    np.testing.assert_array_equal(v.static_values(tf.constant([3])), [3])
    return x

  fn(tf.constant([1, 2]))


def test_check_binary():
  v.check_binary("long_breakpoints", tf.constant([[0, 1, 1]]))
  with pytest.raises(ValueError, match=r"long_breakpoints must hold only 0 "
                     r"and 1, got values \[-1, 0, 2\]"):
    v.check_binary("long_breakpoints", tf.constant([[0, 2, -1]]))

  # Unknown at trace time: nothing to check.
  @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
  def fn(x):
    v.check_binary("long_breakpoints", x)
    return x

  fn(tf.constant([5]))


def test_check_ids_in_range_reads_only_real_tokens():
  ids = tf.constant([[0, 3, 9]])
  # The 9 is padding: fine; the 3 with global length 3 is not.
  v.check_ids_in_range("sentence_ids", ids, tf.constant([[1, 1, 0]]), 0, 4)
  with pytest.raises(ValueError, match=r"sentence_ids must lie in \[0, 3\) "
                     r"\(the global length\) at non-padding tokens, got \[3\]"):
    v.check_ids_in_range("sentence_ids", ids, tf.constant([[1, 1, 0]]), 0, 3)
  with pytest.raises(ValueError, match=r"in \[1, 4\).*got \[0\]"):
    v.check_ids_in_range("sentence_ids", ids, tf.constant([[1, 1, 0]]), 1, 4)
  # Breakpoints: real up to and including the last 1.
  v.check_ids_in_range("sentence_ids", ids, tf.constant([[0, 1, 0]]), 0, 4,
                       real_from_breakpoints=True)
  with pytest.raises(ValueError, match=r"got \[9\]"):
    v.check_ids_in_range("sentence_ids", ids, tf.constant([[0, 0, 1]]), 0, 4,
                         real_from_breakpoints=True)
  # An unknown global length checks nothing.
  v.check_ids_in_range("sentence_ids", ids, tf.constant([[1, 1, 1]]), 0, None)


def test_dim_and_finish():
  x = tf.zeros([2, 3])
  assert v.dim(x, 1) == 3

  @tf.function(input_signature=[tf.TensorSpec([2, None], tf.float32)])
  def fn(x):
    assert v.dim(x, 0) == 2
    assert isinstance(v.dim(x, 1), tf.Tensor)
    return v.dim(x, 1)

  assert int(fn(x)) == 3
  side = {"a": tf.zeros([1, 4]), "b": None}
  out = v.finish(side, unbatched=True)
  assert out["a"].shape == (4,) and out["b"] is None
  assert v.finish(side, unbatched=False) is side
