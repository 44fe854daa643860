"""The original ETC's goldens in tests/data/original_etc/: the folder, its
JSON lines, its two vocabularies, and the model inputs every multi-hop task
(WikiHop, HotpotQA) shares, by the original's name and ours."""

import json
import os
from typing import Any, Dict, List

DATA = os.path.join(os.path.dirname(__file__), "data", "original_etc")

# The original's multi-hop model inputs -> ours.
MULTIHOP_NAMES = {
    "long_token_ids": "token_ids",
    "long_token_type_ids": "segment_ids",
    "long_sentence_ids": "long_sentence_ids",
    "long_paragraph_ids": "long_paragraph_ids",
    "long_paragraph_breakpoints": "long_paragraph_breakpoints",
    "global_token_ids": "global_token_ids",
    "global_token_type_ids": "global_segment_ids",
    "global_paragraph_breakpoints": "global_paragraph_breakpoints",
}


def read_jsonl(name: str) -> List[Any]:
  """The values of DATA/`name`, one JSON value a line."""
  with open(os.path.join(DATA, name), encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def vocabulary(tokenizer: str) -> Dict[str, str]:
  """The featurizer's vocabulary arguments of the goldens' "wordpiece" or
  "sentencepiece" setting."""
  return dict(
      wordpiece=dict(vocab_path=os.path.join(DATA, "vocab.txt")),
      sentencepiece=dict(spm_model_path=os.path.join(DATA, "spm.model")),
  )[tokenizer]
