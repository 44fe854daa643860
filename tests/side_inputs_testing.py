"""Comparisons of side-input dicts, shared by the side-input tests."""

from typing import Any, Dict, Mapping

import numpy as np
import tensorflow as tf

from etc_realformer.features.side_inputs import SIDE_INPUT_KEYS


def as_numpy(side_inputs: Mapping[str, Any]) -> Dict[str, Any]:
  """The dict with every tensor as a numpy array (None stays None)."""
  return {k: (None if v is None else np.asarray(v))
          for k, v in side_inputs.items()}


def assert_side_inputs_equal(actual: Mapping[str, Any],
                             expected: Mapping[str, Any]) -> None:
  """`actual` holds the eight keys; every key of `expected` is an int32
  tensor equal to its value."""
  assert set(actual) == set(SIDE_INPUT_KEYS)
  for key, value in expected.items():
    assert actual[key] is not None, key
    assert actual[key].dtype == tf.int32, key
    np.testing.assert_array_equal(actual[key], value, err_msg=key)
