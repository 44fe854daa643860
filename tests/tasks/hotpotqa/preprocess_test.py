"""Tests for tasks.hotpotqa.preprocess: the training filter, stats, strict
mode and the binary."""

import json

import pytest
import tensorflow as tf

import cli_testing
from etc_realformer.data import tfrecords
from hotpotqa_testing import RELEASED_WORDS
from hotpotqa_testing import released as good
from tasks.common.inputs import input_errors
from tasks.hotpotqa import features as F
from tasks.hotpotqa import preprocess
from tokenization_testing import write_test_vocab


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return write_test_vocab(tmp_path_factory.mktemp("v") / "vocab.txt",
                          RELEASED_WORDS)


def _write(path, items):
  path.write_text(json.dumps(items))
  return str(path)


def test_preprocess_training_filter_stats_and_dev_kept(tmp_path, vocab):
  items = [
      good(0),
      good(1, answer="yes"),
      good(2, answer="Oslo"),  # nowhere in the supporting facts
      good(3, supporting_facts=[["Nobody", 0]]),
      good(4, answer="Rome", supporting_facts=[["Ann", 1]]),
      good(5, _id="e", question="  "),  # a bad record: empty_text
  ]
  featurizer = preprocess.make_featurizer(vocab, None, long_seq_len=48,
                                          global_seq_len=16)
  out = tmp_path / "out"
  train = _write(tmp_path / "hotpot_train_v1.1.json", items)
  stats = preprocess.preprocess_file(train, str(out), featurizer)
  assert stats.examples_read == 6 and stats.examples_written == 3
  assert stats.skipped == {"answer_not_found": 1, "empty_text": 1,
                           "no_supporting_facts": 1}
  with open(out / "hotpot_train_v1.1.stats.json") as f:
    on_disk = json.load(f)
  assert on_disk["examples_skipped"] == 3
  assert {r["id"] for r in on_disk["skipped_records"]} == {"id2", "id3", "e"}
  parsed = list(tfrecords.make_dataset(
      str(out / "hotpot_train_v1.1.tfrecord"),
      F.feature_spec(48, 16)).as_numpy_iterator())
  assert [p["example_id"] for p in parsed] == [b"id0", b"id1", b"id4"]
  assert [int(p["answer_type"]) for p in parsed] == [0, 1, 0]
  assert json.loads(parsed[0]["record_json"])["answer"] == "Paris"

  # Dev: the same records are all kept (bad JSON records aside).
  dev = _write(tmp_path / "hotpot_dev_distractor_v1.json", items)
  stats = preprocess.preprocess_file(dev, str(out), featurizer)
  assert stats.examples_written == 5 and stats.skipped == {"empty_text": 1}
  # Strict: the first bad record (here the training filter's) fails.
  with pytest.raises(input_errors.BadRecordError, match="answer_not_found"):
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
  args = [f"--input={path}", f"--vocab={vocab}",
          f"--output_dir={tmp_path / 'o'}", "--long_seq_len=48",
          "--global_seq_len=16"]
  out = cli_testing.output_here("tasks.hotpotqa.preprocess", args)
  assert "written 1" in out and "answer_not_found" in out
  # A bad record under --strict: one line naming it, exit code 2.
  line = cli_testing.user_error_line("tasks.hotpotqa.preprocess",
                                     args + ["--strict"])
  assert line == (f"error: {path}: record 'id1', field 'answer': "
                  "answer_not_found (answer 'Oslo')")
