"""Comparisons of side-input dicts, shared by the side-input tests."""

from typing import Any, Dict, Mapping

import numpy as np
import tensorflow as tf

from etc_realformer.features.side_inputs import SIDE_INPUT_KEYS


def as_numpy(side_inputs: Mapping[str, Any]) -> Dict[str, Any]:
  """The dict with every tensor as a numpy array (None stays None)."""
  return {k: (None if v is None else np.asarray(v))
          for k, v in side_inputs.items()}


def with_hard_masks(soft: Mapping[str, Any], hard_g2l: bool, hard_l2g: bool,
                    hard_g2l_mask: Any, hard_l2g_mask: Any) -> Dict[str, Any]:
  """The expected side inputs with hard masks: `soft` with each hard mask
  asked for in place of its soft one (each changes only its own
  direction)."""
  expected = dict(soft)
  if hard_l2g:
    expected["l2g_att_mask"] = hard_l2g_mask
  if hard_g2l:
    expected["g2l_att_mask"] = hard_g2l_mask
  return expected


def assert_side_inputs_equal(actual: Mapping[str, Any],
                             expected: Mapping[str, Any]) -> None:
  """`actual` holds the eight keys; every key of `expected` is an int32
  tensor equal to its value."""
  assert set(actual) == set(SIDE_INPUT_KEYS)
  for key, value in expected.items():
    assert actual[key] is not None, key
    assert actual[key].dtype == tf.int32, key
    np.testing.assert_array_equal(actual[key], value, err_msg=key)
