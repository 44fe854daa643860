"""`json_config`: the JSON files of every config class."""

import pytest

from etc_realformer import BertConfig
from etc_realformer import EtcConfig
from etc_realformer.errors import UserInputError


@pytest.mark.parametrize("cls", [EtcConfig, BertConfig])
@pytest.mark.parametrize("name,text,error,match", [
    ("nope.json", None, FileNotFoundError, "nope.json"),  # No such file.
    ("bad.json", "{not json", UserInputError, "bad.json"),
    ("missing.json", "{}", UserInputError, "vocab_size"),
])
def test_file_errors_name_the_file(cls, name, text, error, match, tmp_path):
  path = tmp_path / name
  if text is not None:
    path.write_text(text)
  with pytest.raises(error, match=match):
    cls.from_json_file(str(path))
