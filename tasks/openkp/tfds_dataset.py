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
Featurize with `features.OpenKPFeaturizer.featurize_with_stats(text, start_idx,
feature)`. Bad records are skipped and logged once per file
(`tfds_files.ManualFilesBuilder`).
"""

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from tasks.common.inputs import tfds_files
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

class OpenKp(tfds_files.ManualFilesBuilder):
  """OpenKP from the released jsonl files."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "MS MARCO OpenKP train/dev/eval-public."}
  SPLIT_FILES = {"train": "OpenKPTrain.jsonl",
                 "validation": "OpenKPDev.jsonl",
                 "test": "OpenKPEvalPublic.jsonl"}
  SUBDIRS = ("", "OpenKP", "openkp")
  read_records = staticmethod(data.read_records)
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

  def example(self, record: data.OpenKPRecord):
    return record.url, {
        "url": record.url,
        "text": record.text,
        "vdom": {
            "start_idx": np.array(record.element_starts, np.int32),
            "end_idx": np.array([e.end_idx for e in record.vdom], np.int32),
            "feature": np.array(record.element_features, np.float32),
        },
        "keyphrases": list(record.keyphrases or ()),
    }
