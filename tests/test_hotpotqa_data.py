"""HotpotQA reading, bad-record handling, preprocessing stats and the CLI."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from tasks.common import records
from tasks.hotpotqa import data
from tasks.hotpotqa import features as F
from tasks.hotpotqa import preprocess
from tests.test_common_tokenization import write_test_vocab

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ["who", "is", "x", "?", "born", "in", "paris", "rome", "bob", "ann",
         "was", "big", "yes", "no", ".", "a", "b", "c"]


def good(i, **overrides):
  record = {
      "_id": f"id{i}", "question": "Who is X?", "answer": "Paris",
      "type": "bridge", "level": "easy",
      "supporting_facts": [["Bob", 0], ["Ann", 1]],
      "context": [["Bob", ["Bob was born in Paris.", "Bob is big."]],
                  ["Ann", ["Ann is x.", "Ann was born in Rome."]]],
  }
  record.update(overrides)
  return record


BAD = {
    "missing_field": ({"_id": "m", "question": "q?"}, "context"),
    "wrong_type": (good(0, _id="w", context="text"), "context"),
    "empty_text": (good(0, _id="e", question="  "), "question"),
    "empty_context": (good(0, _id="c", context=[]), "context"),
    "undecodable_text": (None, "question"),  # written as raw bytes below
}


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return write_test_vocab(tmp_path_factory.mktemp("v") / "vocab.txt", WORDS)


def _write(path, items, raw_tail=None):
  text = json.dumps(items)
  if raw_tail is not None:
    text = text[:-1] + ", " + raw_tail + "]"
  with open(path, "wb") as f:
    f.write(text.encode("utf-8", "surrogateescape"))
  return str(path)


def test_reader_skips_counts_and_names_bad_records(tmp_path):
  bad = [r for r, _ in BAD.values() if r is not None]
  undecodable = ('{"_id": "u", "question": "q\udcff?", "context": '
                 '[["T", ["s."]]]}')
  path = _write(tmp_path / "dev.json", [good(0)] + bad + [good(0)],
                raw_tail=undecodable)
  stats = records.RecordStats(input_file=path)
  kept = list(data.read_records(path, stats=stats))
  assert [r.id for r in kept] == ["id0"]
  assert stats.examples_read == 7
  assert stats.skipped == {**{k: 1 for k in BAD}, "duplicate_id": 1}
  named = {(s["id"], s["field"], s["reason"]) for s in stats.skipped_records}
  for reason, (record, field) in BAD.items():
    rid = record["_id"] if record else "u"
    assert (rid, field, reason) in named
  assert all(s["file"] == path for s in stats.skipped_records)
  record = kept[0]
  assert record.titles == ("Bob", "Ann")
  assert record.sentences[1] == ("Ann is x.", "Ann was born in Rome.")
  assert record.supporting_sentences() == {"Bob": [0], "Ann": [1]}
  assert record.to_json() == {k: v for k, v in good(0).items()
                              if k != "level"}


def test_strict_mode_and_unusable_files(tmp_path):
  path = _write(tmp_path / "dev.json", [good(0), BAD["wrong_type"][0]])
  with pytest.raises(records.BadRecordError, match=r"'w'.*'context'"):
    list(data.read_records(path, strict=True))
  for content, message in (("", "empty"), ("{", "not valid JSON"),
                           ('{"a": 1}', "JSON array"), ("[]", "no records")):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(records.InputFileError, match=message):
      list(data.read_records(str(p)))
  with pytest.raises(records.InputFileError, match="cannot read"):
    list(data.read_records(str(tmp_path / "missing.json")))
  # Training files need labels; test-set style records are bad there.
  unlabelled = {k: v for k, v in good(1).items() if k != "answer"}
  p = _write(tmp_path / "train.json", [unlabelled])
  with pytest.raises(records.BadRecordError, match="answer"):
    list(data.read_records(p, strict=True, require_labels=True))
  assert len(list(data.read_records(p))) == 1


def test_preprocess_training_filter_stats_and_dev_kept(tmp_path, vocab):
  items = [
      good(0),
      good(1, answer="yes"),
      good(2, answer="Oslo"),  # nowhere in the supporting facts
      good(3, supporting_facts=[["Nobody", 0]]),
      good(4, answer="Rome", supporting_facts=[["Ann", 1]]),
      BAD["empty_text"][0],
  ]
  featurizer = preprocess.make_featurizer(vocab, None, long_seq_len=48,
                                          global_seq_len=16)
  out = tmp_path / "out"
  train = _write(tmp_path / "hotpot_train_v1.1.json", items)
  stats = preprocess.preprocess_file(train, str(out), featurizer)
  assert stats.examples_read == 6 and stats.examples_written == 3
  assert stats.skipped == {"answer_not_found": 1, "empty_text": 1,
                           "no_supporting_facts": 1}
  on_disk = json.load(open(out / "hotpot_train_v1.1.stats.json"))
  assert on_disk["examples_skipped"] == 3
  assert {r["id"] for r in on_disk["skipped_records"]} == {"id2", "id3", "e"}
  parsed = list(F.make_dataset(str(out / "hotpot_train_v1.1.tfrecord"), 48,
                               16).as_numpy_iterator())
  assert [p["example_id"] for p in parsed] == [b"id0", b"id1", b"id4"]
  assert [int(p["answer_type"]) for p in parsed] == [0, 1, 0]
  assert json.loads(parsed[0]["record_json"])["answer"] == "Paris"

  # Dev: the same records are all kept (bad JSON records aside).
  dev = _write(tmp_path / "hotpot_dev_distractor_v1.json", items)
  stats = preprocess.preprocess_file(dev, str(out), featurizer)
  assert stats.examples_written == 5 and stats.skipped == {"empty_text": 1}
  # Strict: the first bad record (here the training filter's) fails.
  with pytest.raises(records.BadRecordError, match="answer_not_found"):
    preprocess.preprocess_file(
        _write(tmp_path / "train2.json", items[:3]), str(out), featurizer,
        is_training=True, strict=True)
  assert not tf.io.gfile.exists(str(out / "train2.tfrecord"))


def test_preprocess_truncation_stats(tmp_path, vocab):
  featurizer = preprocess.make_featurizer(vocab, None, long_seq_len=16,
                                          global_seq_len=12)
  path = _write(tmp_path / "dev.json", [good(0)])
  stats = preprocess.preprocess_file(path, str(tmp_path), featurizer)
  assert stats.examples_truncated == 1
  assert stats.truncation["sentences_dropped"] > 0


@pytest.mark.slow  # two processes that import TensorFlow
def test_cli(tmp_path, vocab):
  path = _write(tmp_path / "hotpot_train_v1.1.json",
                [good(0), good(1, answer="Oslo")])
  cmd = [sys.executable, "-m", "tasks.hotpotqa.preprocess", f"--input={path}",
         f"--vocab={vocab}", f"--output_dir={tmp_path / 'o'}",
         "--long_seq_len=48", "--global_seq_len=16"]
  env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
  out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO,
                       timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "written 1" in out.stdout and "answer_not_found" in out.stdout
  out = subprocess.run(cmd + ["--strict"], capture_output=True, text=True,
                       env=env, cwd=REPO, timeout=120)
  assert out.returncode != 0
  assert "id1" in out.stderr and "answer_not_found" in out.stderr
