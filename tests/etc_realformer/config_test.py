"""`EtcConfig`: validation that names the field, and the JSON format of the
released checkpoints."""

import json

import pytest

from encoder_testing import tiny_config
from etc_realformer import EtcConfig
from etc_realformer.errors import UserInputError


@pytest.mark.parametrize("changes,field", [
    (dict(relative_vocab_size=9, relative_pos_max_distance=3),
     "relative_vocab_size"),
    (dict(num_attention_heads=3), "num_attention_heads"),
    (dict(residual_patterns=("l2l", "x2y")), "residual_patterns"),
    (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob"),
    (dict(hidden_act="swish"), "hidden_act"),
    (dict(value_output_identity_init=-1.0), "value_output_identity_init"),
    (dict(value_output_identity_init=1.0, att_size_per_head=4),
     "value_output_identity_init"),
    (dict(query_key_identity_init=-0.5), "query_key_identity_init"),
    (dict(query_key_identity_init=1.0, att_size_per_head=4),
     "query_key_identity_init"),
    (dict(own_sentence_bias_init=1.0, relative_vocab_size=None,
          relative_pos_max_distance=0), "own_sentence_bias_init"),
    (dict(count_head_bias_init=-1.0, use_hard_g2l_mask=True),
     "count_head_bias_init"),
    (dict(count_head_bias_init=3.0), "count_head_bias_init"),
    (dict(count_head_bias_init=3.0, use_hard_g2l_mask=True,
          relative_vocab_size=None, relative_pos_max_distance=0),
     "count_head_bias_init"),
    (dict(max_sentence_length_embeddings=-1),
     "max_sentence_length_embeddings"),
    (dict(max_sentence_length_embeddings=8, relative_vocab_size=None,
          relative_pos_max_distance=0), "max_sentence_length_embeddings"),
])
def test_bad_config_names_the_field(changes, field):
  with pytest.raises(UserInputError, match=field):
    tiny_config(**changes)


def test_json_round_trip_and_unknown_keys(tmp_path):
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


def test_execution_keys_of_older_files_are_not_model_fields(tmp_path):
  path = tmp_path / "etc_config.json"
  path.write_text(json.dumps({"vocab_size": 30, "hidden_size": 8,
                              "num_attention_heads": 2,
                              "attention_chunk_len": "auto",
                              "fused_attention_kernel": "auto"}))
  config = EtcConfig.from_json_file(str(path))
  assert config.unknown_keys == {}
  assert "attention_chunk_len" not in config.to_dict()


def test_replace_validates():
  config = tiny_config()
  assert config.replace(num_hidden_layers=5).num_hidden_layers == 5
  with pytest.raises(UserInputError, match="no field"):
    config.replace(attention_chunk_len=3)
  with pytest.raises(UserInputError, match="hidden_size"):
    config.replace(hidden_size=0)


@pytest.mark.parametrize("field,value,expected", [
    ("hidden_size", "wide", "an integer"),
    ("hidden_size", 64.0, "an integer"),
    ("residual_attention", "yes", r"a boolean \(True/False\)"),
    ("hidden_dropout_prob", "0.1", "a number"),
    ("embedding_size", "16", "an integer or null"),
    ("residual_patterns", ["l2l", 2], "a list of strings"),
])
def test_values_of_another_type_name_the_field(field, value, expected):
  with pytest.raises(UserInputError,
                     match=f"EtcConfig.{field}: expected {expected}, got"):
    EtcConfig(vocab_size=10, **{field: value})
  # An int is a float; a list is a tuple (as JSON writes them).
  EtcConfig(vocab_size=10, hidden_dropout_prob=0, residual_patterns=["l2l"])
