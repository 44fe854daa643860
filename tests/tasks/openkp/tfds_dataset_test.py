"""Tests for tasks.openkp.tfds_dataset: the TFDS builder on small files in
the released format."""

import numpy as np
import tensorflow_datasets as tfds

from openkp_testing import make_record
from openkp_testing import vdom_features
from openkp_testing import write_jsonl
from tasks.openkp import tfds_dataset


def test_builder_reads_manual_dir(tmp_path):
  manual = tmp_path / "OpenKP"
  manual.mkdir()
  good = make_record("http://a", [["Zürich", "kp1"], ["b"]], [["kp1"]],
                     [vdom_features(x=1.0), vdom_features(x=2.0)])
  broken = dict(good, url="http://broken", VDOM="[]")
  write_jsonl(str(manual / "OpenKPTrain.jsonl"), [good, broken, good])
  write_jsonl(str(manual / "OpenKPDev.jsonl"), [good])
  unlabeled = dict(good)
  del unlabeled["KeyPhrases"]
  write_jsonl(str(manual / "OpenKPEvalPublic.jsonl"), [unlabeled])
  builder = tfds_dataset.OpenKp(data_dir=str(tmp_path / "data"))
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=str(tmp_path)))
  splits = builder.info.splits
  assert [splits[s].num_examples for s in ("train", "validation", "test")] == [
      1, 1, 1]
  (train,) = tfds.as_numpy(builder.as_dataset(split="train"))
  assert train["url"] == b"http://a"
  assert train["text"].decode() == "Zürich kp1 b"
  assert train["vdom"]["start_idx"].tolist() == [0, 2]
  assert train["vdom"]["end_idx"].tolist() == [2, 3]
  np.testing.assert_allclose(train["vdom"]["feature"][:, 0], [1.0, 2.0])
  assert train["keyphrases"].tolist() == [b"kp1"]
  (test,) = tfds.as_numpy(builder.as_dataset(split="test"))
  assert test["keyphrases"].tolist() == []
