"""Bad inputs and bad configs raise errors that name the argument."""

import json

import numpy as np
import pytest

from encoder_testing import random_features, tiny_config
from etc_realformer import EtcConfig, EtcModel


@pytest.fixture(scope="module")
def model():
  m = EtcModel(tiny_config())
  m.build()
  return m


@pytest.fixture
def feats():
  return random_features(tiny_config(), batch=2, long_len=8, global_len=3)


def test_missing_required_key(model, feats):
  del feats["global_token_ids"]
  with pytest.raises(ValueError, match="global_token_ids"):
    model(feats)


def test_wrong_rank(model, feats):
  feats["token_ids"] = feats["token_ids"][0]
  with pytest.raises(ValueError, match="token_ids: expected rank 2"):
    model(feats)


@pytest.mark.parametrize("key,shape", [
    ("l2l_att_mask", [2, 8, 7]),           # window of the wrong radius
    ("l2g_att_mask", [2, 8, 4]),           # global length mismatch
    ("g2l_relative_att_ids", [2, 3, 9]),   # long length mismatch
    ("segment_ids", [1, 8]),               # batch mismatch
])
def test_mismatched_shapes(model, feats, key, shape):
  feats[key] = np.zeros(shape, np.int32)
  with pytest.raises(ValueError, match=key):
    model(feats)


@pytest.mark.parametrize("key,value", [("token_ids", 50), ("segment_ids", 16),
                                       ("l2l_relative_att_ids", 8),
                                       ("global_token_ids", -1)])
def test_ids_out_of_range(model, feats, key, value):
  feats[key] = feats[key].copy()
  feats[key][0, 0] = value
  with pytest.raises(ValueError, match=key):
    model(feats)


def test_mask_must_be_binary(model, feats):
  feats["g2g_att_mask"] = feats["g2g_att_mask"] * 2
  with pytest.raises(ValueError, match="g2g_att_mask"):
    model(feats)


def test_unknown_implementation(model, feats):
  with pytest.raises(ValueError, match="att_implementation"):
    model(feats, att_implementation="dense")


@pytest.mark.parametrize("changes,field", [
    (dict(relative_vocab_size=9, relative_pos_max_distance=3),
     "relative_vocab_size"),
    (dict(num_attention_heads=3), "num_attention_heads"),
    (dict(residual_patterns=("l2l", "x2y")), "residual_patterns"),
    (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob"),
])
def test_bad_config(changes, field):
  with pytest.raises(ValueError, match=field):
    tiny_config(**changes)


def test_config_json_round_trip_and_unknown_keys(tmp_path, caplog):
  path = tmp_path / "etc_config.json"
  path.write_text(json.dumps({"vocab_size": 30, "hidden_size": 8,
                              "num_attention_heads": 2, "intermediate_size": 16,
                              "some_future_flag": True}))
  config = EtcConfig.from_json_file(str(path))
  assert config.unknown_keys == {"some_future_flag": True}
  assert config.residual_attention is False  # released JSONs: original ETC
  assert config.local_radius == 84 and config.relative_vocab_size == 32
  config.to_json_file(str(tmp_path / "out.json"))
  again = EtcConfig.from_json_file(str(tmp_path / "out.json"))
  assert again.to_dict() == config.to_dict()


def test_config_file_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="nope.json"):
    EtcConfig.from_json_file(str(tmp_path / "nope.json"))
  bad = tmp_path / "bad.json"
  bad.write_text("{not json")
  with pytest.raises(ValueError, match="bad.json"):
    EtcConfig.from_json_file(str(bad))
  missing = tmp_path / "missing.json"
  missing.write_text("{}")
  with pytest.raises(ValueError, match="vocab_size"):
    EtcConfig.from_json_file(str(missing))
