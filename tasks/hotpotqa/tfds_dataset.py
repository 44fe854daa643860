"""TFDS builder for HotpotQA (distractor), from manually downloaded files.

  import tensorflow_datasets as tfds
  from tasks.hotpotqa import tfds_dataset  # registers "hotpot_qa_distractor"
  ds = tfds.load("hotpot_qa_distractor", split="validation",
                 download_and_prepare_kwargs=dict(
                     download_config=tfds.download.DownloadConfig(
                         manual_dir="/path/to/hotpotqa")))

Yields the raw records (id, question, answer, type, supporting facts as
parallel title / sentence-id lists, context as titles plus sentences with
per-paragraph counts: the inputs of `features.HotpotFeaturizer.featurize`).
Bad records are skipped and logged, as in `preprocess.py`; training-only
filters (answer not locatable) belong to featurization, not to the dataset.
"""

import tensorflow as tf
import tensorflow_datasets as tfds

from tasks.common.inputs import tfds_files
from tasks.hotpotqa import data

_DESCRIPTION = """\
HotpotQA (Yang et al. 2018), distractor setting: multi-hop questions over ten
Wikipedia paragraphs (two gold, eight distractors), with the sentences that
support the answer annotated. Answers are spans, "yes" or "no".
"""

_CITATION = """\
@inproceedings{yang2018hotpotqa,
  title={HotpotQA: A Dataset for Diverse, Explainable Multi-hop Question
         Answering},
  author={Yang, Zhilin and Qi, Peng and Zhang, Saizheng and Bengio, Yoshua
          and Cohen, William W. and Salakhutdinov, Ruslan and Manning,
          Christopher D.},
  booktitle={EMNLP}, year={2018}
}
"""


def to_tfds_example(record: data.HotpotRecord) -> dict:
  """A validated record in the builder's feature structure."""
  facts = record.supporting_facts or ()
  return {
      "id": record.id,
      "question": record.question,
      "answer": record.answer or "",
      "type": record.type,
      "supporting_facts": {"title": [t for t, _ in facts],
                           "sent_id": [i for _, i in facts]},
      "titles": list(record.titles),
      "sentences": [s for para in record.sentences for s in para],
      "num_sentences": [len(p) for p in record.sentences],
  }


class HotpotQaDistractor(tfds_files.ManualFilesBuilder):
  """HotpotQA distractor from the released JSON files."""

  VERSION = tfds.core.Version("1.1.0")
  RELEASE_NOTES = {"1.1.0": "hotpot_train_v1.1 / hotpot_dev_distractor_v1."}
  SUBDIRS = ("", "hotpotqa", "hotpot")
  SPLIT_FILES = {"train": "hotpot_train_v1.1.json",
                 "validation": "hotpot_dev_distractor_v1.json"}
  read_records = staticmethod(data.read_records)
  DESCRIPTION = _DESCRIPTION
  HOMEPAGE = "https://hotpotqa.github.io/"
  CITATION = _CITATION
  MANUAL_DOWNLOAD_INSTRUCTIONS = """\
Download hotpot_train_v1.1.json and hotpot_dev_distractor_v1.json from
https://hotpotqa.github.io/ and pass as manual_dir the folder holding them
(or a folder holding hotpotqa/ with them).
"""

  def features(self):
    text = tfds.features.Text()
    return {
        "id": text,
        "question": text,
        "answer": text,
        "type": text,
        "supporting_facts": tfds.features.Sequence({
            "title": text,
            "sent_id": tf.int32,
        }),
        "titles": tfds.features.Sequence(text),
        "sentences": tfds.features.Sequence(text),
        "num_sentences": tfds.features.Sequence(tf.int32),
    }

  def example(self, record: data.HotpotRecord):
    return record.id, to_tfds_example(record)
