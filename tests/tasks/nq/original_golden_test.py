"""NQ features against the original ETC NQ preprocessing.

`tests/data/original_etc/` holds NQ records in the original (full) format
(`nq.jsonl`) and every window the original `NQPreprocessor` (`to_tf_example`
then `split_example`) made of them (`nq_features.jsonl`; its README says
how), with the WordPiece vocabulary and the SentencePiece model of that
folder, at small lengths where answers straddle window edges and the global
input fills up. Every model input, every label and the window bookkeeping
must be equal, window by window.
"""

import os

import numpy as np
import pytest

import original_etc_testing
from tasks.nq import data
from tasks.nq import features as F

DATA = original_etc_testing.DATA
# The original's feature names -> ours.
NAMES = {
    "token_ids": "token_ids",
    "long_breakpoints": "long_breakpoints",
    "sentence_ids": "sentence_ids",
    "global_token_ids": "global_token_ids",
    "global_breakpoints": "global_breakpoints",
    "candidate_ids": "long_candidate_index",
    "token_pos": "doc_token_map",
    "global_candidate_ids": "global_candidate_index",
}
LABELS = {
    "answer_type": "answer_type",
    "la_start": "long_start",
    "la_end": "long_end",
    "sa_start": "short_start",
    "sa_end": "short_end",
}
# The golden vocabulary has no [unused99..103]; the goldens were made with
# vocab.txt plus these five lines (ids 1001..1005), so [unused102] (HTML
# start tag) is 1004 and [unused103] (end tag) 1005.
EXTRA_WORDPIECE = [f"[unused{i}]" for i in range(99, 104)]
# The SentencePiece model has no <unused_N> pieces; the original was given
# <unused_63> = 2 ([CLS]), <unused_2> = 3 ([SEP]), <unused_35> = 500 and
# <unused_36> = 501.
SENTENCEPIECE_IDS = F.NqTokenIds(cls=2, sep=3, html_start=500, html_end=501,
                                 global_cls=2)


def _goldens():
  return original_etc_testing.read_jsonl("nq_features.jsonl")


def _setting_key(setting):
  return (setting["tokenizer"], setting["long_seq_len"],
          setting["global_seq_len"], setting["stride"],
          setting["question_len"])


def _records():
  """The records, through the project's file reader."""
  return {r.example_id: r for r in data.read_records(
      os.path.join(DATA, "nq.jsonl"), strict=True)}


def _featurizer(setting, tmp_path) -> F.NqFeaturizer:
  lengths = dict(long_seq_len=setting["long_seq_len"],
                 global_seq_len=setting["global_seq_len"],
                 stride=setting["stride"],
                 max_question_len=setting["question_len"])
  if setting["tokenizer"] == "sentencepiece":
    return F.NqFeaturizer(spm_model_path=os.path.join(DATA, "spm.model"),
                          token_ids=SENTENCEPIECE_IDS, **lengths)
  vocab = tmp_path / "vocab.txt"
  with open(os.path.join(DATA, "vocab.txt"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  vocab.write_text("\n".join(lines + EXTRA_WORDPIECE) + "\n",
                   encoding="utf-8")
  # The default special ids: [CLS], [SEP], [unused102], [unused103].
  return F.NqFeaturizer(str(vocab), **lengths)


def _featurize(featurizer, record, predict_la_when_no_sa=False):
  """All windows of `record` as numpy arrays, through the featurizer's
  `tf.function` as preprocessing and serving run it. (Its Python function
  run eagerly is the same ops, but over a setting's records it costs more
  CPU than the one trace.)"""
  return featurizer.featurize_record(record, predict_la_when_no_sa)[0]


def _simplified(record: data.NqRecord) -> data.NqRecord:
  """The record as the simplified format has it: `document_text`, no
  `html_token` flags (tags are recognized by their text), no bytes."""
  raw = data.record_to_json(record)
  raw["document_text"] = " ".join(t["token"] for t in raw.pop(
      "document_tokens"))
  for cand in raw["long_answer_candidates"]:
    del cand["start_byte"], cand["end_byte"]
  return data.validate_record(raw, "simplified", 1)


def _assert_windows_equal(got, golden):
  windows = golden["windows"]
  assert len(got["token_ids"]) == len(windows), golden["id"]
  for w, theirs in enumerate(windows):
    where = f"{golden['id']} window {w}"
    for name, ours in {**NAMES, **LABELS}.items():
      np.testing.assert_array_equal(got[ours][w], np.squeeze(theirs[name]),
                                    err_msg=f"{where}: {ours}")
    assert got["example_id"][w] == theirs["unique_ids"][0]
    assert got["window_index"][w] == w
    assert got["num_windows"][w] == len(windows)
    # The original fed the model no token types; ours are all 0.
    assert not got["segment_ids"][w].any()
    assert not got["global_segment_ids"][w].any()
    # The original's global_token_pos_start / _end are the first / last
    # document token (inclusive, 0 elsewhere) of a candidate's wordpieces;
    # ours are the candidate's own [start_token, end_token) (-1 elsewhere).
    # Every candidate here starts and ends with an HTML tag (one wordpiece),
    # so they agree.
    cand = got["global_candidate_index"][w] >= 0
    np.testing.assert_array_equal(
        np.where(cand, got["global_candidate_doc_start"][w], 0),
        theirs["global_token_pos_start"], err_msg=where)
    np.testing.assert_array_equal(
        np.where(cand, got["global_candidate_doc_end"][w] - 1, 0),
        theirs["global_token_pos_end"], err_msg=where)


GOLDENS = [g for g in _goldens() if "error" not in g]
SETTINGS = sorted({_setting_key(g["setting"]) for g in GOLDENS})


def _goldens_of(key):
  return [g for g in GOLDENS if _setting_key(g["setting"]) == key]


def _setting(key, tmp_path):
  """The goldens of setting `key`, its featurizer and the records by id."""
  goldens = _goldens_of(key)
  return goldens, _featurizer(goldens[0]["setting"], tmp_path), _records()


def _assert_setting_equals_the_original(key, tmp_path, as_read=lambda r: r):
  """Every golden of setting `key`: the windows of its record, as `as_read`
  gives it, are the original's."""
  goldens, featurizer, records = _setting(key, tmp_path)
  for golden in goldens:
    got = _featurize(featurizer, as_read(records[golden["id"]]))
    _assert_windows_equal(got, golden)


# One test per setting (each builds its featurizer: a tokenizer's resources
# do not outlive the per-test reseeding of TensorFlow's eager context).
@pytest.mark.parametrize("key", SETTINGS,
                         ids=["-".join(map(str, k)) for k in SETTINGS])
def test_windows_equal_the_original(key, tmp_path):
  _assert_setting_equals_the_original(key, tmp_path)


def test_simplified_format_gives_the_same_windows(tmp_path):
  # The original reads only the full format; the simplified one must give
  # the same windows (its reader finds the HTML tags by their text).
  _assert_setting_equals_the_original(("wordpiece", 128, 32, 64, 16),
                                      tmp_path, as_read=_simplified)


def test_predict_la_when_no_sa(tmp_path):
  # The original's option: an annotation with a long answer and no short
  # answer uses its long answer as the short span, looked up the same way.
  goldens, featurizer, records = _setting(("wordpiece", 64, 16, 24, 8),
                                          tmp_path)
  changed = 0
  for golden in goldens:
    record = records[golden["id"]]
    got = _featurize(featurizer, record, predict_la_when_no_sa=True)
    a = record.annotations[0] if record.annotations else None
    long_only = a is not None and not a.short_answers and (
        not a.long_answer.is_null)
    for w, theirs in enumerate(golden["windows"]):
      short = ((theirs["la_start"][0], theirs["la_end"][0]) if long_only
               else (theirs["sa_start"][0], theirs["sa_end"][0]))
      assert (got["short_start"][w], got["short_end"][w]) == short
      assert got["answer_type"][w] == theirs["answer_type"][0]
      changed += long_only and short != (0, 0)
  assert changed >= 3


def _labels(key):
  return [tuple(w[k][0] for k in LABELS) for g in _goldens_of(key)
          for w in g["windows"]]


def test_goldens_cover_the_edge_cases():
  assert not [g for g in _goldens() if "error" in g]
  assert {s[0] for s in SETTINGS} == {"wordpiece", "sentencepiece"}
  assert len(SETTINGS) == 4 and len(GOLDENS) == 24
  windows = [w for g in GOLDENS for w in g["windows"]]
  assert {w["answer_type"][0] for w in windows} == {-1, 0, 1, 2, 3, 4}
  # Spans cut by a window edge: one end in the window, the other at [CLS].
  labels = [label for key in SETTINGS for label in _labels(key)]
  assert any(t == 4 and s > 0 and e == 0 for t, _, _, s, e in labels)
  assert any(t == 4 and s == 0 and e > 0 for t, _, _, s, e in labels)
  assert any(t == 3 and s > 0 and e == 0 for t, s, e, _, _ in labels)
  assert any(t == 3 and s == 0 and e > 0 for t, s, e, _, _ in labels)
  # Full global inputs (later candidates share the last global token).
  assert sum(w["global_breakpoints"][-1] for w in windows) >= 10
  # Questions longer than the question length.
  assert any(len(w["question_ids"]) > key[4] for key in SETTINGS
             for g in _goldens_of(key) for w in g["windows"])
