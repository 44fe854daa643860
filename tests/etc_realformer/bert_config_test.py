"""`BertConfig`: Google's and RealFormer's bert_config.json."""

import json

import pytest

from conftest import DATA_DIR
from etc_realformer import BertConfig
from etc_realformer.errors import UserInputError


def test_realformer_json_turns_residual_attention_on():
  config = BertConfig.from_json_file(
      str(DATA_DIR / "realformer_bert_small" / "bert_config.json"))
  assert config.is_realformer and config.uses_residual_attention
  etc = config.to_etc_config()
  assert etc.residual_attention and not etc.residual_running_mean
  assert etc.max_absolute_position_embeddings == 40
  assert etc.local_radius == 39 and etc.relative_vocab_size is None
  assert etc.segment_vocab_size == config.type_vocab_size


def test_google_json_is_plain_and_override_wins(tmp_path):
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps({"vocab_size": 30, "hidden_size": 8,
                              "num_attention_heads": 2, "directionality":
                              "bidi"}))
  config = BertConfig.from_json_file(str(path))
  assert not config.is_realformer and not config.uses_residual_attention
  assert config.unknown_keys == {"directionality": "bidi"}
  forced = BertConfig(vocab_size=30, hidden_size=8, num_attention_heads=2,
                      residual_attention=True)
  assert forced.uses_residual_attention
  running = BertConfig(vocab_size=30, hidden_size=8, num_attention_heads=2,
                       use_running_mean=True)
  assert running.to_etc_config().residual_running_mean


@pytest.mark.parametrize("values,field", [
    ({"vocab_size": 30, "hidden_size": 10, "num_attention_heads": 3},
     "num_attention_heads"),
    ({"vocab_size": 30, "hidden_act": "swish"}, "hidden_act"),
    ({"vocab_size": 0}, "vocab_size"),
    ({"hidden_size": 8}, "vocab_size"),
])
def test_bad_values_name_the_field(values, field):
  with pytest.raises(UserInputError, match=field):
    BertConfig.from_dict(values)
