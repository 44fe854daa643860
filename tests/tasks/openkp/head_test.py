"""Tests for tasks.openkp.head: the visual features' font buckets, scaling
and dense inputs (the model as a whole is tested through the task)."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.errors import UserInputError
from tasks.openkp import head


def test_font_buckets_and_coordinate_scaling_by_hand():
  sizes = [-3, 0, 0.4, 1, 8, 8.5, 9, 24, 25, 29, 30, 49, 50, 200]
  # Cutoffs 0, 8..24, 29, 34, 39, 44, 49: id = first cutoff >= round(size);
  # 8.5 rounds half to even (8), as Python's round.
  assert head.font_ids(tf.constant(sizes, tf.float32)).numpy().tolist() == [
      0, 0, 0, 1, 1, 1, 2, 17, 18, 18, 19, 22, 23, 23]
  assert head.FONT_ID_VOCAB_SIZE == 24
  scaled = head.scale_to_unit(tf.constant([-100.0, -50.0, 725.0, 1500.0, 9e9]),
                           -50.0, 1500.0)
  np.testing.assert_allclose(scaled.numpy(), [-1, -1, 0, 1, 1])


def test_dense_visual_inputs():
  layer = head.VdomEmbedding(8)
  element = [100.0, 1500.0, 6000.0, -5.0, 1, 1, 0, 1, 16, 0]
  parent = [-50.0, 0.0, -50.0, 18000.0, 1, 0, 1, 0, 30, 1]
  dense = layer.dense_inputs(tf.constant([element + parent])).numpy()[0]
  expected = [(100 - 725) / 775, 1, 1, -1,  # x, y, width, height
              -1, -1, -1, 1,                # parent
              1, 1, 1, 0, 1]                # inline, leaf, p-heading/leaf/bold
  np.testing.assert_allclose(dense, expected, rtol=1e-6)
  assert layer(tf.zeros([2, 3, 20])).shape == [2, 3, 8]


def test_coord_ranges_override_the_defaults():
  ranges = head.check_coord_ranges({"y": [-50, 8000], "x": (0, np.float32(5))})
  assert ranges == dict(head.DEFAULT_COORD_RANGES, y=(-50.0, 8000.0),
                        x=(0.0, 5.0))
  assert head.check_coord_ranges(None) == head.DEFAULT_COORD_RANGES
  layer = head.VdomEmbedding(8, coord_ranges={"width": (0, 10)})
  assert layer.coord_ranges["width"] == (0.0, 10.0)


@pytest.mark.parametrize("ranges,message", [
    # An empty range divides by zero (NaN), a reversed one clips to a
    # constant.
    ({"x": (10, 10)}, r"\['x'\] = \(10, 10\): high must be above low"),
    ({"height": (10, 5)}, r"\['height'\] = \(10, 5\): high must be above"),
    ({"widht": (0, 10)}, r"\['widht'\]: unknown coordinate; known: height, "
                         r"width, x, y"),
    ({"x": 5}, r"\['x'\] = 5: expected a \(low, high\) pair"),
    ({"x": (1, 2, 3)}, r"\['x'\] = \(1, 2, 3\): expected a \(low, high\)"),
    ({"x": ("0", "9")}, r"expected a \(low, high\) pair of finite numbers"),
    ({"y": (0, float("inf"))}, r"\['y'\] = \(0, inf\): expected"),
    ({"y": (float("nan"), 1)}, r"\['y'\] = \(nan, 1\): expected"),
    ([("x", (0, 1))], r"coord_ranges = \[.*\]: expected a dict"),
])
def test_bad_coord_ranges_name_the_setting_and_value(ranges, message):
  with pytest.raises(UserInputError, match=message) as e:
    head.check_coord_ranges(ranges, "Setting.coord_ranges")
  assert str(e.value).startswith("Setting.coord_ranges")
  # The layer names its own setting.
  with pytest.raises(UserInputError, match=r"^VdomEmbedding\.coord_ranges"):
    head.VdomEmbedding(8, coord_ranges=ranges)
