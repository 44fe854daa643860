"""Tests for tasks.wikihop.tfds_dataset: the builder on small files in the
released format."""

import json

import pytest
import tensorflow_datasets as tfds

from tasks.common.inputs import input_errors
from tasks.wikihop import tfds_dataset


def _record(i, split):
  return dict(id=f"WH_{split}_{i}", query=f"country_of x{i}",
              candidates=["Aland ", "bora"], answer="bora",
              supports=[f"X{i} is in Bora.", "Aland is big."])


def test_builder_reads_manual_dir(tmp_path, caplog):
  manual = tmp_path / "qangaroo_v1.1" / "wikihop"
  manual.mkdir(parents=True)
  (manual / "train.json").write_text(json.dumps(
      [_record(i, "train") for i in range(3)] + [{"id": "broken"}]))
  (manual / "dev.json").write_text(json.dumps([_record(0, "dev")]))
  builder = tfds_dataset.WikiHop(data_dir=str(tmp_path / "data"))
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=str(tmp_path)))
  assert builder.info.splits["train"].num_examples == 3
  # The bad record is skipped, and logged once
  # (`tasks.common.inputs.tfds_files`).
  assert [r.getMessage() for r in caplog.records if "skipped" in
          r.getMessage()] == [f"{manual / 'train.json'}: skipped 1 bad "
                              "records {'missing_field': 1}"]
  assert builder.info.splits["validation"].num_examples == 1
  dev = list(tfds.as_numpy(builder.as_dataset(split="validation")))
  assert dev[0]["id"] == b"WH_dev_0"
  assert dev[0]["query"] == b"country_of x0"
  assert dev[0]["candidates"].tolist() == [b"aland", b"bora"]
  assert dev[0]["answer"] == b"bora"
  assert dev[0]["supports"].tolist() == [b"X0 is in Bora.", b"Aland is big."]
  train_ids = sorted(r["id"] for r in tfds.as_numpy(
      builder.as_dataset(split="train")))
  assert train_ids == [b"WH_train_0", b"WH_train_1", b"WH_train_2"]


def test_builder_names_missing_files(tmp_path):
  builder = tfds_dataset.WikiHop(data_dir=str(tmp_path / "data"))
  with pytest.raises(input_errors.InputFileError,
                     match=r"train.json not found .*qangaroo_v1.1/wikihop"):
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        manual_dir=str(tmp_path)))
