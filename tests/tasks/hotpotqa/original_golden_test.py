"""HotpotQA features against the original ETC example generation.

`tests/data/original_etc/` holds records in the official distractor format
and what the original `HotpotQATFExampleConverter` made of them (its README
says how), with a WordPiece vocabulary and a SentencePiece model, at lengths
that truncate, in training mode (span and BIO labels) and in eval mode.

Every model input must be equal, and so must the labels, except for the
project's deliberate differences, which are asserted as such:
- `global_sentence_ids`: after truncation skipped a sentence, the original
  numbers the later kept sentences of the paragraph as if it were not there;
  ours keep their index in the paragraph (decoding maps supporting-fact
  predictions back with it).
- yes / no answers: ours point at CLS (0, 0) with an all-O BIO; the original
  looks the word up in the supporting facts ("yes" in "eyes").
- occurrences in supporting text that truncation dropped: the original still
  labels them, at the long position the text would have started (here in
  the padding); ours do not, and skip a training example with
  `answer_truncated` when that is its only occurrence.
"""

import json
import os
import re

import numpy as np
import pytest

import original_etc_testing
from tasks.hotpotqa import data
from tasks.hotpotqa import features as F

DATA = original_etc_testing.DATA
# The original's model inputs -> ours.
NAMES = {
    **original_etc_testing.MULTIHOP_NAMES,
    "global_paragraph_ids": "global_paragraph_ids",
}
# (id, tokenizer, long_seq_len) where truncation skipped a sentence and kept
# a later one of the same paragraph: `global_sentence_ids` differ there.
RENUMBERED = {
    ("HP_golden_01", "sentencepiece", 160),
    ("HP_golden_08", "wordpiece", 160),
    ("HP_golden_08", "sentencepiece", 160),
    ("HP_golden_09", "wordpiece", 160),
    ("HP_golden_12", "wordpiece", 160),
}
# Training examples the original drops (`convert` returns None), with our
# skip reason.
DROPPED = {
    ("HP_golden_03", "sentencepiece", 512): data.ANSWER_NOT_FOUND,  # km² -> km2
    ("HP_golden_03", "sentencepiece", 160): data.ANSWER_NOT_FOUND,
    ("HP_golden_05", "wordpiece", 160): data.NO_SUPPORTING_FACTS,
    ("HP_golden_05", "sentencepiece", 160): data.NO_SUPPORTING_FACTS,
    ("HP_golden_06", "wordpiece", 160): data.ANSWER_TRUNCATED,
    ("HP_golden_06", "sentencepiece", 160): data.ANSWER_TRUNCATED,
    ("HP_golden_07", "sentencepiece", 160): data.ANSWER_TRUNCATED,
    ("HP_golden_09", "sentencepiece", 160): data.ANSWER_TRUNCATED,
}
# Training examples whose only occurrence was dropped, which the original
# labels in the padding and we skip.
TRUNCATED_ONLY = {("HP_golden_03", "wordpiece", 160),
                  ("HP_golden_07", "wordpiece", 160)}
# Examples where the original BIO also marks occurrences of dropped text.
BIO_OF_DROPPED = {("HP_golden_08", "wordpiece", 160)}


def _goldens():
  return original_etc_testing.read_jsonl("hotpotqa_features.jsonl")


def _records():
  with open(os.path.join(DATA, "hotpotqa.json"), encoding="utf-8") as f:
    raw = json.load(f)
  return {r["_id"]: data.validate_record(r, "hotpotqa.json", i)
          for i, r in enumerate(raw)}


def _key(golden):
  s = golden["setting"]
  return s["tokenizer"], s["long_seq_len"], s["global_seq_len"]


def _featurizer(key) -> F.HotpotFeaturizer:
  tokenizer, long_seq_len, global_seq_len = key
  vocab = original_etc_testing.vocabulary(tokenizer)
  # The default special ids are the original's for each vocabulary kind.
  return F.HotpotFeaturizer(**vocab, long_seq_len=long_seq_len,
                            global_seq_len=global_seq_len)


def _renumbered(features):
  """Our `global_sentence_ids` numbered as the original's: the kept
  sentences of each paragraph counted 0, 1, 2, ..."""
  out = np.array(features["global_sentence_ids"])
  seen = {}
  for g in np.flatnonzero(features["global_kinds"] == F.KIND_SENTENCE):
    para = int(features["global_paragraph_ids"][g])
    out[g] = seen.get(para, 0)
    seen[para] = out[g] + 1
  return out


def _kinds(golden, cls):
  """`global_kinds` from the original's ids."""
  kinds = []
  for token, sentence in zip(golden["global_token_ids"],
                             golden["global_sentence_ids"]):
    kinds.append({0: F.KIND_PAD, cls: F.KIND_CLS, 3: F.KIND_QUESTION,
                  41: F.KIND_QUESTION, 5: F.KIND_PARAGRAPH,
                  43: F.KIND_PARAGRAPH}.get(token) if token != 1 else
                 (F.KIND_TITLE if sentence < 0 else F.KIND_SENTENCE))
  kinds[0] = F.KIND_CLS
  return kinds


def _unigrams(features, record):
  """Per long token, its whitespace word in its text (as the original's
  `long_tokens_to_unigrams`), from our byte offsets; -1 outside texts."""
  out = np.full(features["token_ids"].shape, -1)
  for i, g in enumerate(features["long_sentence_ids"]):
    if features["long_token_start"][i] < 0:
      continue
    sentence = int(features["global_sentence_ids"][g])
    text = F.text_of(record, int(features["global_paragraph_ids"][g]),
                     sentence)
    prefix = text.encode("utf-8")[:features["long_token_start"][i]].decode(
        "utf-8")
    # The words begun before; the original splits words on these only
    # (not on a non-breaking space).
    out[i] = len(re.split("[ \t\r\n\u202f]+", prefix + "x")) - 1
    if re.match("[ \t\r\n\u202f]", prefix):
      out[i] -= 1  # leading delimiters begin no word
  return out


def _check(golden, record, features, reason, cls):
  key = (golden["id"],) + _key(golden)[:2]
  where = f"{golden['id']} {golden['setting']}"
  for theirs, ours in NAMES.items():
    np.testing.assert_array_equal(features[ours], golden[theirs],
                                  err_msg=f"{where}: {ours}")
  assert features["example_id"] == golden["unique_ids"][0].encode()
  # Ours besides the original's, consistent with it.
  np.testing.assert_array_equal(features["global_kinds"],
                                _kinds(golden, cls), err_msg=where)
  np.testing.assert_array_equal(features["ignore_hard_g2l_mask"],
                                np.arange(len(golden["global_token_ids"]))
                                == 0)
  if "long_tokens_to_unigrams" in golden:  # WordPiece only
    np.testing.assert_array_equal(_unigrams(features, record),
                                  golden["long_tokens_to_unigrams"],
                                  err_msg=where)
  # Deliberate: sentence numbering after a skipped sentence.
  np.testing.assert_array_equal(_renumbered(features),
                                golden["global_sentence_ids"], err_msg=where)
  renumbered = not np.array_equal(features["global_sentence_ids"],
                                  golden["global_sentence_ids"])
  assert renumbered == (key in RENUMBERED), where

  if not golden["setting"]["is_training"]:
    assert reason is None
    return
  if key in TRUNCATED_ONLY:
    # Deliberate: the original labels a position in the padding.
    assert reason == data.ANSWER_TRUNCATED, where
    num_long = int((features["token_ids"] != 0).sum())
    spans = (np.flatnonzero(np.array(golden["answer_bio_ids"]) == 0)
             if "answer_bio_ids" in golden else golden["answer_begins"])
    assert len(spans) and min(spans) >= num_long, where
    return
  assert reason is None, where
  np.testing.assert_array_equal(features["supporting_facts"],
                                golden["supporting_facts"], err_msg=where)
  assert int(features["answer_type"]) == golden["answer_types"][0], where
  if int(features["answer_type"]) != data.SPAN:
    # Deliberate: yes / no point at CLS, whatever the text holds.
    assert (int(features["answer_start"]),
            int(features["answer_end"])) == (0, 0)
    assert (features["answer_bio_ids"] == F.BIO_OUTSIDE).all()
    return
  if "answer_begins" in golden:
    assert (int(features["answer_start"]), int(features["answer_end"])) == (
        golden["answer_begins"][0], golden["answer_ends"][0]), where
  else:
    bio = np.array(golden["answer_bio_ids"])
    if key in BIO_OF_DROPPED:
      # Deliberate: the original also marks the dropped text's occurrences,
      # in the padding.
      num_long = int((features["token_ids"] != 0).sum())
      assert (bio[num_long:] != F.BIO_OUTSIDE).any(), where
      bio[num_long:] = F.BIO_OUTSIDE
    np.testing.assert_array_equal(features["answer_bio_ids"], bio,
                                  err_msg=where)


GOLDENS = _goldens()
KEYS = sorted({_key(g) for g in GOLDENS})


# One test per vocabulary and lengths (each builds its featurizer: a
# tokenizer's resources do not outlive the per-test reseeding of
# TensorFlow's eager context).
@pytest.mark.parametrize("key", KEYS, ids=["-".join(map(str, k))
                                           for k in KEYS])
def test_features_equal_the_original(key):
  featurizer = _featurizer(key)
  cls = featurizer.global_token_ids.cls
  records = _records()
  seen_dropped = set()
  for golden in (g for g in GOLDENS if _key(g) == key):
    assert "error" not in golden
    record = records[golden["id"]]
    features, _, reason = featurizer.featurize_record(
        record, is_training=golden["setting"]["is_training"])
    short_key = (golden["id"],) + key[:2]
    if golden.get("dropped"):
      assert reason == DROPPED[short_key], golden
      seen_dropped.add(short_key)
      continue
    _check(golden, record, features, reason, cls)
  assert seen_dropped == {k for k in DROPPED if k[1:] == key[:2]}


def test_goldens_cover_both_vocabularies_truncation_and_modes():
  assert len(KEYS) == 4
  assert {k[0] for k in KEYS} == {"wordpiece", "sentencepiece"}
  modes = {(g["setting"]["is_training"],
            g["setting"]["answer_encoding_method"]) for g in GOLDENS}
  assert modes == {(True, "span"), (True, "bio"), (False, "span")}
  assert not any("error" in g for g in GOLDENS)
  assert len(GOLDENS) == 8 * len(_records())
