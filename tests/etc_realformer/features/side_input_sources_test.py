"""`side_input_sources.from_features`: the side inputs of a task's raw
features."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.config import EtcConfig
from etc_realformer.features import side_input_sources
from etc_realformer.features import side_inputs as si

KEYS = si.SIDE_INPUT_KEYS


@pytest.fixture
def golden(golden_dir):
  return dict(np.load(golden_dir / "reference.npz"))


def _assert_equal(actual, expected):
  for key in KEYS:
    np.testing.assert_array_equal(np.asarray(actual[key]), expected[key],
                                  err_msg=key)


def test_from_features_by_source(golden):
  config = EtcConfig(vocab_size=30, local_radius=4,
                     relative_pos_max_distance=2, relative_vocab_size=10)
  breakpoints = {k: golden[k] for k in ("long_breakpoints",
                                        "global_breakpoints", "sentence_ids")}
  _assert_equal(side_input_sources.from_features(config, breakpoints,
                                                "breakpoints"),
                {k: golden[k] for k in KEYS})
  # Input masks as example ids: the same pattern for unpacked examples.
  long_mask = np.cumsum(golden["long_breakpoints"][:, ::-1], 1)[:, ::-1]
  global_mask = np.cumsum(golden["global_breakpoints"][:, ::-1], 1)[:, ::-1]
  masks = dict(long_input_mask=long_mask, global_input_mask=global_mask,
               long_sentence_ids=golden["sentence_ids"])
  _assert_equal(side_input_sources.from_features(config, masks, "input_masks"),
                {k: golden[k] for k in KEYS})
  with pytest.raises(ValueError, match="missing"):
    side_input_sources.from_features(config, masks, "breakpoints")
  with pytest.raises(ValueError, match="source"):
    side_input_sources.from_features(config, masks, "paragraphs")


def test_with_side_inputs_in_tf_data(golden):
  config = EtcConfig(vocab_size=30, local_radius=4,
                     relative_pos_max_distance=0, relative_vocab_size=None)
  features = {k: golden[k] for k in ("long_breakpoints", "global_breakpoints",
                                     "sentence_ids", "token_ids")}
  ds = tf.data.Dataset.from_tensor_slices(features).map(
      lambda f: side_input_sources.with_side_inputs(config, f, "breakpoints"))
  element = next(iter(ds.batch(2)))
  assert "l2l_relative_att_ids" not in element
  assert "token_ids" in element
  np.testing.assert_array_equal(element["l2l_att_mask"],
                                golden["l2l_att_mask"])
