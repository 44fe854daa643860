"""WikiHop features against the original ETC example generation.

`tests/data/original_etc/` holds records in the official format and the
features the original `WikiHopTFExampleConverter` made of them (its README
says how), with a WordPiece vocabulary and a SentencePiece model, at lengths
that truncate. Every model input and the label must be equal.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import original_etc_testing
from tasks.wikihop import data
from tasks.wikihop import features as F

DATA = original_etc_testing.DATA
# The original's feature names -> ours.
NAMES = {
    **original_etc_testing.MULTIHOP_NAMES,
    "l2g_linked_ids": "l2g_linked_ids",
}
# The original's global token ids, whatever the vocabulary.
ORIGINAL_IDS = F.GlobalTokenIds(sentence=1, question=3, candidate=4,
                                paragraph=5)


def _goldens():
  return original_etc_testing.read_jsonl("wikihop_features.jsonl")


def _setting_key(setting):
  return (setting["tokenizer"], setting["long_seq_len"],
          setting["global_seq_len"], setting["max_num_sentences"])


def _featurizer(setting) -> F.WikiHopFeaturizer:
  vocab = original_etc_testing.vocabulary(setting["tokenizer"])
  return F.WikiHopFeaturizer(
      **vocab, long_seq_len=setting["long_seq_len"],
      global_seq_len=setting["global_seq_len"],
      max_num_sentences=setting["max_num_sentences"],
      global_token_ids=ORIGINAL_IDS)


def _records():
  with open(os.path.join(DATA, "wikihop.json"), encoding="utf-8") as f:
    return {r["id"]: r for r in json.load(f)}


GOLDENS = [g for g in _goldens() if "error" not in g]
SETTINGS = sorted({_setting_key(g["setting"]) for g in GOLDENS})


# One test per setting (each builds its featurizer: a tokenizer's resources
# do not outlive the per-test reseeding of TensorFlow's eager context).
@pytest.mark.parametrize("key", SETTINGS,
                         ids=["-".join(map(str, k)) for k in SETTINGS])
def test_features_equal_the_original(key):
  goldens = [g for g in GOLDENS if _setting_key(g["setting"]) == key]
  featurizer = _featurizer(goldens[0]["setting"])
  records = _records()
  for golden in goldens:
    record = data.validate_record(records[golden["id"]], "wikihop.json", 0)
    got, stats = featurizer.featurize_record(record)
    assert stats["overflow"] == 0
    for theirs, ours in NAMES.items():
      np.testing.assert_array_equal(got[ours], golden[theirs],
                                    err_msg=f"{golden['id']}: {ours}")
    assert got["label"] == int(golden["label_id"][0]), golden["id"]
    assert [c.decode("utf-8") for c in got["candidates"]] == golden[
        "candidates"]


def test_goldens_cover_truncation_and_both_vocabularies():
  assert {s[0] for s in SETTINGS} == {"wordpiece", "sentencepiece"}
  assert len(SETTINGS) == 4 and len(GOLDENS) >= 40


def test_serving_path_gives_the_original_features():
  # serve_raw's path: the client splits the supports (split_supports) and
  # the graph featurizes; the same features as preprocessing, so the
  # original's.
  key = ("wordpiece", 160, 48, 200)
  goldens = [g for g in GOLDENS if _setting_key(g["setting"]) == key]
  featurizer = _featurizer(goldens[0]["setting"])

  @tf.function(input_signature=[
      tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.string),
      tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int32)])
  def serve(query, candidates, sentences, num_sentences):
    return featurizer.featurize(query, candidates, sentences,
                                             num_sentences)

  records = _records()
  for golden in goldens:
    record = records[golden["id"]]
    got = serve(record["query"], record["candidates"],
                *F.split_supports(record["supports"]))
    for theirs, ours in NAMES.items():
      np.testing.assert_array_equal(got[ours].numpy(), golden[theirs],
                                    err_msg=f"{golden['id']}: {ours}")
