"""Tests for tasks.nq.preprocess: TFRecords + stats, downsampling, strict,
the binary (and its one-line errors)."""

import gzip
import json
import os

import pytest

from demos.nq import synthetic
import cli_testing
from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError
from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.nq import data
from tasks.nq import features as F
from tasks.nq import preprocess

L, G, STRIDE, QLEN = 64, 24, 24, 8


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  return synthetic.write_dataset(str(tmp_path_factory.mktemp("nq")),
                                 num_train=12, num_dev=6, seed=3,
                                 bad_train_lines=True)


@pytest.fixture(scope="module")
def featurizer(files):
  return preprocess.make_featurizer(files["vocab"], None, long_seq_len=L,
                                    global_seq_len=G, stride=STRIDE,
                                    max_question_len=QLEN)


def windows(path):
  return tfrecords.make_dataset(path, F.feature_spec(L, G))


def test_writes_tfrecords_and_stats(files, featurizer, tmp_path):
  out = str(tmp_path / "out")
  stats = preprocess.preprocess(files["train"], out, featurizer)
  record_path, stats_path = preprocess.output_paths(files["train"], out)
  assert os.path.basename(record_path) == "nq-train-00.tfrecord"
  saved = record_stats.read_stats_json(stats_path)
  assert saved["examples_read"] == 14 and saved["examples_written"] == 12
  assert saved["skipped"] == {data.BAD_JSON: 1, data.SPAN_OUT_OF_RANGE: 1}
  assert {(s["id"], s["field"]) for s in saved["skipped_records"]} == {
      ("1", "long_answer_candidates[0]"), ("line 14", "<line>")}
  assert saved["is_training"] and saved["windows_downsampled"] == 0
  assert saved["windows_written"] == stats.windows_written == sum(
      1 for _ in windows(record_path))
  assert sum(saved["windows_by_answer_type"].values()) == (
      saved["windows_written"])
  assert saved["windows_written"] > saved["examples_written"]  # multi-window
  assert saved["settings"]["long_seq_len"] == L
  summary = record_stats.read_stats_json(os.path.join(out, "nq_stats.json"))
  assert summary["windows_written"] == saved["windows_written"]
  assert summary["files"][0]["input_file"] == files["train"]
  # Parsed windows carry the spec.
  first = next(iter(windows(record_path)))
  assert set(first) == set(F.feature_spec(L, G))
  assert first["token_ids"].shape == (L,)


def test_downsampling_null_windows(files, featurizer, tmp_path):
  keep_all = preprocess.preprocess_file(files["train"], str(tmp_path / "a"),
                                        featurizer)
  nulls = keep_all.windows_by_answer_type["null"]
  assert nulls > 0
  none = preprocess.preprocess_file(
      files["train"], str(tmp_path / "b"), featurizer,
      include_unknown_rate=0.0, include_unknown_rate_for_unanswerable=0.0)
  assert none.windows_by_answer_type["null"] == 0
  assert none.windows_downsampled == nulls
  assert none.windows_written == keep_all.windows_written - nulls
  # Seeded: the same windows twice; in between for rate 0.5.
  half = [preprocess.preprocess_file(
      files["train"], str(tmp_path / d), featurizer, include_unknown_rate=0.5,
      include_unknown_rate_for_unanswerable=0.5, seed=1) for d in "cd"]
  assert half[0].to_dict() | {"input_file": ""} == (
      half[1].to_dict() | {"input_file": ""})
  c_path, _ = preprocess.output_paths(files["train"], str(tmp_path / "c"))
  d_path, _ = preprocess.output_paths(files["train"], str(tmp_path / "d"))
  with open(c_path, "rb") as c, open(d_path, "rb") as d:
    assert c.read() == d.read()
  assert 0 <= half[0].windows_downsampled <= nulls
  # Default rate for unanswerable examples: min(1, 4 x rate).
  assert preprocess.unanswerable_rate(0.1, None) == pytest.approx(0.4)
  assert preprocess.unanswerable_rate(0.5, None) == 1.0


def test_dev_keeps_every_window(files, featurizer, tmp_path):
  stats = preprocess.preprocess_file(files["dev"], str(tmp_path), featurizer,
                                     include_unknown_rate=0.0)
  assert not stats.is_training and stats.windows_downsampled == 0
  assert stats.examples_written == 6


def test_strict_fails_and_leaves_no_output(files, featurizer, tmp_path):
  with pytest.raises(input_errors.BadRecordError, match="span_out_of_range"):
    preprocess.preprocess_file(files["train"], str(tmp_path), featurizer,
                               strict=True)
  assert not [p for p in os.listdir(tmp_path) if "tfrecord" in p]


def test_bad_rate(files, featurizer, tmp_path):
  with pytest.raises(UserInputError, match="include_unknown_rate"):
    preprocess.preprocess_file(files["train"], str(tmp_path), featurizer,
                               include_unknown_rate=1.5)


@pytest.mark.slow  # a process that imports TensorFlow
def test_cli(files, tmp_path):
  # In this process: the binary's own process runs in the strict test below
  # (and with worker processes in beam_pipeline_test).
  out = cli_testing.output_here("tasks.nq.preprocess", [
      f"--input={files['train']},{files['simplified_train']}",
      f"--vocab={files['vocab']}", f"--output_dir={tmp_path}",
      f"--long_seq_len={L}", f"--global_seq_len={G}", f"--stride={STRIDE}",
      f"--max_question_len={QLEN}", "--include_unknown_rate=0.5"])
  assert "written 24 examples" in out
  with open(tmp_path / "nq_stats.json") as f:
    summary = json.load(f)
  assert len(summary["files"]) == 2 and summary["examples_skipped"] == 2
  assert (tmp_path / "simplified-nq-train.tfrecord").exists()


def test_cli_truncated_json_line_under_strict_is_one_line(files, tmp_path):
  with gzip.open(files["dev"], "rb") as f:
    first = f.readline()
  cut = tmp_path / "nq-dev-cut.jsonl"
  cut.write_bytes(first + first[:len(first) // 2] + b"\n")
  line = cli_testing.user_error_line(
      "tasks.nq.preprocess",
      [f"--input={cut}", f"--vocab={files['vocab']}",
       f"--output_dir={tmp_path / 'out'}", "--strict", f"--long_seq_len={L}",
       f"--global_seq_len={G}", f"--stride={STRIDE}",
       f"--max_question_len={QLEN}"], timeout=300)
  assert str(cut) in line and "line 2" in line and data.BAD_JSON in line
  assert not list((tmp_path / "out").glob("*.tfrecord"))
