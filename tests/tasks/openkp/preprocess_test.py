"""Tests for tasks.openkp.preprocess: TFRecords + stats + the deduplicated
jsonl, strict mode, the binary's one-line errors."""

import json

import pytest

import cli_testing
from etc_realformer.data import tfrecords
from openkp_testing import FILLER
from openkp_testing import VOCAB_WORDS
from openkp_testing import make_record
from openkp_testing import write_jsonl
from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.openkp import data
from tasks.openkp import features as F
from tasks.openkp import preprocess
from tokenization_testing import write_test_vocab

GOOD = make_record("http://good", [["Machine", "Learning"], ["is", "fun"]],
                   [["machine", "learning"]])
EMPTY_VDOM = dict(GOOD, url="u-vdom-empty", VDOM="[]")
BAD_VDOM = dict(GOOD, url="u-vdom-str", VDOM="[{oops")


def test_preprocess_strict_fails_before_writing(tmp_path):
  vocab = write_test_vocab(tmp_path / "vocab.txt", VOCAB_WORDS)
  path = write_jsonl(str(tmp_path / "OpenKPDev.jsonl"),
                     [GOOD, EMPTY_VDOM])
  featurizer = preprocess.make_featurizer(vocab, None, 16, 4)
  with pytest.raises(input_errors.BadRecordError, match="u-vdom-empty"):
    preprocess.preprocess_file(path, str(tmp_path / "out"), featurizer,
                               strict=True)
  assert not (tmp_path / "out" / "OpenKPDev.tfrecord").exists()


def test_preprocess_writes_records_stats_and_dedup_jsonl(tmp_path):
  vocab = write_test_vocab(tmp_path / "vocab.txt", VOCAB_WORDS)
  long_rec = make_record("http://long", [["kp1"] + FILLER[:30]], [["kp1"]])
  late_rec = make_record("http://late", [FILLER[:30] + ["kp2"]], [["kp2"]])
  path = write_jsonl(str(tmp_path / "OpenKPTrain.jsonl"),
                     [GOOD, long_rec, late_rec, BAD_VDOM])
  featurizer = preprocess.make_featurizer(vocab, None, 16, 4)
  out = tmp_path / "out"
  stats = preprocess.preprocess_file(path, str(out), featurizer)
  assert stats.examples_written == 2  # late_rec: gold cut by truncation
  assert stats.skipped == {data.INVALID_VDOM: 1,
                           data.KEYPHRASES_TRUNCATED: 1}
  saved = record_stats.read_stats_json(str(out / "OpenKPTrain.stats.json"))
  assert saved["examples_truncated"] == 1
  assert saved["truncation"]["words_dropped"] == 31 - 16
  dedup = [json.loads(l) for l in open(out / "OpenKPTrain.dedup.jsonl")]
  assert [d["url"] for d in dedup] == ["http://good", "http://long",
                                       "http://late"]
  parsed = list(tfrecords.make_dataset(str(out / "OpenKPTrain.tfrecord"),
                                       F.feature_spec(16, 4)))
  assert [p["url"].numpy() for p in parsed] == [b"http://good",
                                                b"http://long"]
  assert parsed[0]["keyphrases"].numpy().tolist() == [b"machine learning"]
  assert parsed[0]["label_start"].numpy().tolist() == [0, -1, -1]
  assert parsed[0]["label_length"].numpy().tolist() == [2, -1, -1]
  # Dev files keep documents whose gold was cut (they count in the metric).
  dev = write_jsonl(str(tmp_path / "OpenKPDev.jsonl"), [late_rec])
  stats = preprocess.preprocess_file(dev, str(out), featurizer)
  assert stats.examples_written == 1 and not stats.skipped
  assert stats.truncation["keyphrases_truncated"] == 1


def test_cli_truncated_json_line_under_strict_is_one_line(tmp_path):
  vocab = write_test_vocab(tmp_path / "vocab.txt", VOCAB_WORDS)
  line = json.dumps(GOOD)
  path = tmp_path / "OpenKPDev.jsonl"
  path.write_text(line + "\n" + line[:len(line) // 2] + "\n")
  error = cli_testing.user_error_line(
      "tasks.openkp.preprocess",
      [f"--input={path}", f"--vocab={vocab}",
       f"--output_dir={tmp_path / 'out'}", "--strict", "--long_seq_len=16",
       "--global_seq_len=4"], timeout=300)
  assert str(path) in error and "line 2" in error
  assert data.NOT_JSON in error
  assert not (tmp_path / "out" / "OpenKPDev.tfrecord").exists()
