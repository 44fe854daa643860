"""Tests for tasks.pretrain.preprocess: the shards and the stats (documents
read / used / filtered, bad input named, examples, tokens, CPC-eligible
sentences, the most frequent wordpiece), determinism given the seed, and
the binary's one-line errors (exit code 2)."""

import json
import os

import numpy as np
import pytest

import cli_testing
from etc_realformer.data import tfrecords
from tasks.common.inputs import record_stats
from tasks.pretrain import data
from tasks.pretrain import features
from tasks.pretrain import preprocess
import pretrain_testing


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  return pretrain_testing.write_data(str(tmp_path_factory.mktemp("pp")))


def _run(corpus, vocab, out, **settings):
  featurizer = features.PretrainFeaturizer(
      vocab_path=vocab, long_seq_len=pretrain_testing.LONG,
      global_seq_len=pretrain_testing.GLOBAL)
  stats = record_stats.RecordStats(input_file=corpus, strict=False)
  return preprocess.preprocess_documents(
      data.read_documents(corpus, stats), featurizer, out,
      preprocess.Settings(**settings), stats,
      preprocess.vocabulary_info(featurizer.tokenizer))


def test_shards_and_stats(tiny, tmp_path):
  corpus = str(tmp_path / "corpus.txt")
  with open(tiny["corpus"]) as f:
    text = f.read()
  # Two short documents (filtered), a bad line, and the tiny corpus.
  with open(corpus, "wb") as f:
    f.write(b"w1 w2 .\nw3 .\n\nw4 \xff .\nw5 .\n\n" + text.encode())
  result = _run(corpus, tiny["vocab"], str(tmp_path / "out"),
                eval_fraction=0.25, num_shards=3, seed=0)
  with open(tmp_path / "out" / preprocess.STATS_FILE) as f:
    assert json.load(f) == json.loads(json.dumps(result))
  docs = result["documents"]
  assert docs["read"] == 24 + 2
  assert docs["filtered"] == {preprocess.TOO_FEW_SENTENCES: 2}
  assert docs["used"] == docs["train"] + docs["eval"] == 24
  assert 0 < docs["eval"] < 12
  assert result["skipped"] == {data.UNDECODABLE_TEXT: 1}
  assert result["skipped_records"][0]["id"] == "line 4"
  assert [os.path.basename(p) for p in result["outputs"]["train"]] == [
      f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
  spec = features.feature_spec(pretrain_testing.LONG,
                               pretrain_testing.GLOBAL)
  counts = np.zeros(120, np.int64)
  for split in preprocess.SPLITS:
    examples = [e for p in result["outputs"][split]
                for e in tfrecords.make_dataset(p, spec).as_numpy_iterator()]
    assert len(examples) == result["examples"][split]
    lengths = [features.sentence_lengths(e) for e in examples]
    assert sum(int(l.sum()) for l in lengths) == result["tokens"][split]
    assert sum(len(l) for l in lengths) == result["sentences"][split]
    assert sum(int(((l >= 2) & (l <= 64)).sum()) for l in lengths) == (
        result["cpc_eligible_sentences"][split])
    if split == "train":
      for e, l in zip(examples, lengths):
        counts += np.bincount(e["token_ids"][:l.sum()], minlength=120)
  top = result["most_frequent_wordpiece"]
  assert top["id"] == int(np.argmax(counts)) and top["piece"] == "."
  assert top["count"] == counts.max()
  assert top["frequency"] == pytest.approx(counts.max() / counts.sum())
  assert result["vocabulary"] == {"kind": "wordpiece", "size": 110,
                                  "mask_token_id": 14,
                                  "special_token_ids": [0, 12, 13, 14]}
  # Deterministic given the seed; another seed splits differently.
  again = _run(corpus, tiny["vocab"], str(tmp_path / "again"),
               eval_fraction=0.25, num_shards=3, seed=0)
  for a, b in zip(result["outputs"]["train"], again["outputs"]["train"]):
    with open(a, "rb") as fa, open(b, "rb") as fb:
      assert fa.read() == fb.read()
  other = _run(corpus, tiny["vocab"], str(tmp_path / "other"),
               eval_fraction=0.25, num_shards=3, seed=1)
  assert other["documents"]["eval"] != docs["eval"] or (
      other["examples"] != result["examples"])


def test_binary_skips_and_counts_or_fails_with_strict(tiny, tmp_path):
  """The strict run in a process of its own, as a user runs it; the other
  in this process (a process start imports TensorFlow)."""
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"w1 w2 .\n" * 8 + b"\n" + b"w3 \xff .\n")
  args = [f"--input={bad}", f"--vocab={tiny['vocab']}", "--long_seq_len=64",
          "--global_seq_len=8", "--eval_fraction=0"]
  strict = cli_testing.run("tasks.pretrain.preprocess", [
      *args, f"--output_dir={tmp_path / 'strict'}", "--strict"], timeout=240)
  cli_testing.assert_user_error(strict.returncode, strict.stderr, str(bad),
                                "'line 10'", "field 'text'",
                                "undecodable_text")
  assert not strict.stdout
  assert not (tmp_path / "strict").exists() or not any(
      (tmp_path / "strict").iterdir())
  stdout = cli_testing.output_here("tasks.pretrain.preprocess", [
      *args, f"--output_dir={tmp_path / 'lenient'}"])
  assert "used 1 (train 1, eval 0)" in stdout
  assert "'undecodable_text': 1" in stdout


def test_binary_rerun_with_fewer_shards_replaces_the_output_whole(
    tiny, tmp_path):
  out = tmp_path / "out"
  args = [f"--input={tiny['corpus']}", f"--vocab={tiny['vocab']}",
          f"--output_dir={out}", f"--long_seq_len={pretrain_testing.LONG}",
          f"--global_seq_len={pretrain_testing.GLOBAL}",
          "--eval_fraction=0.25"]
  cli_testing.output_here("tasks.pretrain.preprocess",
                          [*args, "--num_shards=4"])
  cli_testing.output_here("tasks.pretrain.preprocess",
                          [*args, "--num_shards=2"])
  assert sorted(os.listdir(out)) == [
      "eval-00000-of-00001.tfrecord", preprocess.STATS_FILE,
      "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
  with open(out / preprocess.STATS_FILE) as f:
    stats = json.load(f)
  spec = features.feature_spec(pretrain_testing.LONG, pretrain_testing.GLOBAL)
  # The documented glob reads this run's examples, as many as its stats say.
  read = sum(1 for _ in tfrecords.make_dataset(
      str(out / "train-*.tfrecord"), spec).as_numpy_iterator())
  assert read == stats["examples"]["train"] > 0
  assert sorted(os.listdir(tmp_path)) == ["out"]


def test_binary_input_of_nul_bytes_writes_nothing_and_fails(tiny, tmp_path):
  nuls = tmp_path / "nuls.txt"
  nuls.write_bytes(b"\0" * 4096)
  out = tmp_path / "out"
  cli_testing.user_error_line_here("tasks.pretrain.preprocess", [
      f"--input={nuls}", f"--vocab={tiny['vocab']}", f"--output_dir={out}"],
      str(nuls), "no example written: read 1 records")
  assert sorted(os.listdir(tmp_path)) == ["nuls.txt"]
