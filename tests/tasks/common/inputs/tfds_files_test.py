"""`tfds_files.ManualFilesBuilder`, through the tasks' builders."""

import pytest
import tensorflow_datasets as tfds

from tasks.common.inputs import input_errors
from tasks.hotpotqa import tfds_dataset as hotpotqa_tfds
from tasks.openkp import tfds_dataset as openkp_tfds


@pytest.mark.parametrize("builder_class,first_file", [
    (hotpotqa_tfds.HotpotQaDistractor, "hotpot_train_v1.1.json"),
    (openkp_tfds.OpenKp, "OpenKPTrain.jsonl"),
])
def test_builder_names_missing_files(builder_class, first_file, tmp_path):
  builder = builder_class(data_dir=str(tmp_path / "data"))
  with pytest.raises(
      input_errors.InputFileError, match=f"{first_file} not found"):
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        manual_dir=str(tmp_path)))
