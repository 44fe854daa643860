"""TFDS builder for OpenKP (MS MARCO), from manually downloaded jsonl files.

  import tensorflow_datasets as tfds
  from tasks.openkp import tfds_dataset  # registers "open_kp"
  ds = tfds.load("open_kp", split="validation",
                 download_and_prepare_kwargs=dict(
                     download_config=tfds.download.DownloadConfig(
                         manual_dir="/path/to/openkp")))

Yields the validated, de-duplicated records (`data.read_records`: at most 3
keyphrases that occur as whole words; EvalPublic -> split "test", without
keyphrases) with the VDOM as per-element tensors (`start_idx`, `end_idx`,
`feature` [20]; element texts are the words [start_idx, end_idx) of `text`).
Featurize with `features.OpenKPFeaturizer.featurize_tf(text, start_idx,
feature)`. Bad records are skipped and logged, as in `preprocess.py`.
"""

import os

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from tasks.common import records
from tasks.openkp import data

_DESCRIPTION = """\
OpenKP (Xiong et al. 2019): open-domain web keyphrase extraction. Each
document is a web page's text with its visual DOM (position, size, font and
block/inline/heading/leaf/bold of every text element and its parent) and up
to 3 human keyphrases.
"""

_CITATION = """\
@inproceedings{xiong2019open,
  title={Open Domain Web Keyphrase Extraction Beyond Language Modeling},
  author={Xiong, Lee and Hu, Chuan and Xiong, Chenyan and Campos, Daniel and
          Overwijk, Arnold},
  booktitle={EMNLP-IJCNLP}, year={2019}
}
"""

_SPLIT_FILES = {"train": "OpenKPTrain.jsonl",
                "validation": "OpenKPDev.jsonl",
                "test": "OpenKPEvalPublic.jsonl"}


class OpenKp(tfds.core.GeneratorBasedBuilder):
  """OpenKP from the released jsonl files."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "MS MARCO OpenKP train/dev/eval-public."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = """\
Download OpenKPTrain.jsonl, OpenKPDev.jsonl and OpenKPEvalPublic.jsonl from
https://microsoft.github.io/msmarco/ (OpenKP) and pass their folder as
manual_dir (or a folder holding an OpenKP/ subfolder with them).
"""

  def _info(self) -> tfds.core.DatasetInfo:
    text = tfds.features.Text()
    return self.dataset_info_from_configs(
        description=_DESCRIPTION,
        features=tfds.features.FeaturesDict({
            "url": text,
            "text": text,
            "vdom": tfds.features.Sequence({
                "start_idx": tf.int32,
                "end_idx": tf.int32,
                "feature": tfds.features.Tensor(
                    shape=(data.NUM_VDOM_FEATURES,), dtype=tf.float32),
            }),
            "keyphrases": tfds.features.Sequence(text),
        }),
        supervised_keys=None,
        homepage="https://github.com/microsoft/OpenKP",
        citation=_CITATION,
    )

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    manual_dir = os.fspath(dl_manager.manual_dir)
    return {split: self._generate_examples(records.find_manual_file(
        manual_dir, name, subdirs=("", "OpenKP", "openkp"),
        instructions=self.MANUAL_DOWNLOAD_INSTRUCTIONS))
            for split, name in _SPLIT_FILES.items()}

  def _generate_examples(self, path: str):
    stats = records.RecordStats(input_file=path, strict=False)
    for record in data.read_records(path, stats=stats):
      yield record.url, {
          "url": record.url,
          "text": record.text,
          "vdom": {
              "start_idx": np.array(record.element_starts, np.int32),
              "end_idx": np.array([e.end_idx for e in record.vdom],
                                  np.int32),
              "feature": np.array(record.element_features, np.float32),
          },
          "keyphrases": list(record.keyphrases or ()),
      }
    if stats.num_skipped:
      logging.warning("%s: skipped %d bad records %s", path,
                      stats.num_skipped, dict(stats.skipped))
