"""`json_config`: the JSON files of every config class."""

import pytest

from etc_realformer import BertConfig
from etc_realformer import EtcConfig
from etc_realformer.errors import UserInputError


@pytest.mark.parametrize("cls", [EtcConfig, BertConfig])
def test_file_errors_name_the_file(cls, tmp_path):
  with pytest.raises(FileNotFoundError, match="nope.json"):
    cls.from_json_file(str(tmp_path / "nope.json"))
  bad = tmp_path / "bad.json"
  bad.write_text("{not json")
  with pytest.raises(UserInputError, match="bad.json"):
    cls.from_json_file(str(bad))
  missing = tmp_path / "missing.json"
  missing.write_text("{}")
  with pytest.raises(UserInputError, match="vocab_size"):
    cls.from_json_file(str(missing))
