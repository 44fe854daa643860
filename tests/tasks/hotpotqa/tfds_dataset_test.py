"""Tests for tasks.hotpotqa.tfds_dataset: the builder on small files in the
released format."""

import json

import tensorflow as tf
import tensorflow_datasets as tfds

from hotpotqa_testing import released as good
from tasks.hotpotqa import features as F
from tasks.hotpotqa import tfds_dataset
from tokenization_testing import write_test_vocab


def test_builder_reads_manual_dir_and_feeds_the_featurizer(tmp_path):
  manual = tmp_path / "hotpotqa"
  manual.mkdir()
  (manual / "hotpot_train_v1.1.json").write_text(json.dumps(
      [good(i) for i in range(3)] + [{"_id": "broken"}]))
  (manual / "hotpot_dev_distractor_v1.json").write_text(json.dumps(
      [good(0, answer="yes")]))
  builder = tfds_dataset.HotpotQaDistractor(data_dir=str(tmp_path / "data"))
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=str(tmp_path)))
  assert builder.info.splits["train"].num_examples == 3
  assert builder.info.splits["validation"].num_examples == 1
  dev = next(iter(builder.as_dataset(split="validation")))
  assert dev["id"].numpy() == b"id0" and dev["answer"].numpy() == b"yes"
  assert dev["titles"].numpy().tolist() == [b"Bob", b"Ann"]
  assert dev["num_sentences"].numpy().tolist() == [2, 2]
  assert dev["supporting_facts"]["title"].numpy().tolist() == [b"Bob",
                                                               b"Ann"]
  assert dev["supporting_facts"]["sent_id"].numpy().tolist() == [0, 1]
  # The dataset's fields are the featurizer's inputs, in graph.
  vocab = write_test_vocab(tmp_path / "vocab.txt", ["bob", "ann", "paris"])
  featurizer = F.HotpotFeaturizer(vocab, long_seq_len=40, global_seq_len=16)
  ds = builder.as_dataset(split="train").map(
      lambda r: featurizer.featurize(r["question"], r["titles"],
                                        r["sentences"], r["num_sentences"],
                                        r["id"]))
  batch = next(iter(ds.batch(3)))
  assert batch["token_ids"].shape == [3, 40]
  # Two paragraphs: paragraph, title, two sentences each; then padding.
  assert batch["global_kinds"].numpy()[0].tolist()[-11:] == [
      3, 4, 5, 5, 3, 4, 5, 5, 0, 0, 0]
  assert tf.reduce_all(batch["long_token_start"] >= -1)
