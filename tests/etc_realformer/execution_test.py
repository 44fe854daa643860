"""`ExecutionConfig`: the speed/memory choices and how "auto" resolves."""

import pytest
import tensorflow as tf

from etc_realformer import ExecutionConfig
from etc_realformer import execution
from etc_realformer.errors import UserInputError


def test_auto_chunk_len_by_length():
  config = ExecutionConfig()
  assert config.attention_chunk_len == "auto"
  auto_max = execution.AUTO_UNCHUNKED_MAX_LEN
  assert config.chunk_len_for(auto_max) == 0
  assert config.chunk_len_for(auto_max + 1) == execution.AUTO_CHUNK_LEN
  assert config.chunk_len_for(16384) == execution.AUTO_CHUNK_LEN
  assert config.chunk_len_for(tf.constant(16384)) == 0  # dynamic: unchunked
  assert config.replace(attention_chunk_len=0).chunk_len_for(16384) == 0
  assert config.replace(attention_chunk_len=512).chunk_len_for(100) == 512


def test_auto_implementation_by_length():
  config = ExecutionConfig()
  assert config.implementation_for(execution.AUTO_FULL_MAX_LEN) == "full"
  assert config.implementation_for(execution.AUTO_FULL_MAX_LEN + 1) == (
      "sparse")
  assert config.implementation_for(None) == "sparse"
  assert config.implementation_for(64, requested="sparse") == "sparse"
  assert ExecutionConfig(att_implementation="full").implementation_for(
      4096) == "full"


@pytest.mark.parametrize("bad", [-1, "fast", 2.5, True, None])
def test_rejects_bad_chunk_settings(bad):
  with pytest.raises(UserInputError, match="attention_chunk_len"):
    ExecutionConfig(attention_chunk_len=bad)


def test_rejects_unknown_implementation():
  with pytest.raises(ValueError, match="att_implementation"):
    ExecutionConfig(att_implementation="dense")
  with pytest.raises(ValueError, match="att_implementation"):
    ExecutionConfig().implementation_for(10, requested="dense")
