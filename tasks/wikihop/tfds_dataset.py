"""TFDS builder for WikiHop (qangaroo v1.1), from manually downloaded files.

  import tensorflow_datasets as tfds
  from tasks.wikihop import tfds_dataset  # registers "wiki_hop"
  ds = tfds.load("wiki_hop", split="validation",
                 download_and_prepare_kwargs=dict(
                     download_config=tfds.download.DownloadConfig(
                         manual_dir="/path/to/qangaroo_v1.1/wikihop")))

Yields the raw records (id, query, candidates, answer, supports) with
candidates and answer normalized (`strip().lower()`); featurize them by
splitting the supports with Punkt in Python (`features.split_supports`) and
calling `features.WikiHopFeaturizer.featurize`. Bad records are skipped and
logged, as in `preprocess.py`.
"""

import os

import tensorflow_datasets as tfds

from tasks.common.inputs import tfds_files
from tasks.wikihop import data

_DESCRIPTION = """\
WikiHop (QAngaroo, Welbl et al. 2018): multi-hop reading comprehension. Each
example has a query "relation subject", a set of candidate answers and a set
of support documents; the answer needs facts from several documents.
"""

_CITATION = """\
@article{welbl2018constructing,
  title={Constructing Datasets for Multi-hop Reading Comprehension Across
         Documents},
  author={Welbl, Johannes and Stenetorp, Pontus and Riedel, Sebastian},
  journal={Transactions of the Association for Computational Linguistics},
  volume={6}, pages={287--302}, year={2018}
}
"""


class WikiHop(tfds_files.ManualFilesBuilder):
  """WikiHop from the released qangaroo json files."""

  VERSION = tfds.core.Version("1.1.0")
  RELEASE_NOTES = {"1.1.0": "qangaroo v1.1 WikiHop train/dev."}
  # Where the files may sit inside manual_dir (the release zip unpacks to
  # qangaroo_v1.1/wikihop/).
  SUBDIRS = ("", "wikihop", os.path.join("qangaroo_v1.1", "wikihop"))
  SPLIT_FILES = {"train": "train.json", "validation": "dev.json"}
  read_records = staticmethod(data.read_records)
  DESCRIPTION = _DESCRIPTION
  HOMEPAGE = "http://qangaroo.cs.ucl.ac.uk/"
  CITATION = _CITATION
  MANUAL_DOWNLOAD_INSTRUCTIONS = """\
Download qangaroo_v1.1.zip from http://qangaroo.cs.ucl.ac.uk/ (the dataset
terms require a manual download), unzip it, and pass as manual_dir the folder
holding wikihop/train.json and wikihop/dev.json (or the wikihop/ folder, or
one holding the two files directly).
"""

  def features(self):
    text = tfds.features.Text()
    return {
        "id": text,
        "query": text,
        "candidates": tfds.features.Sequence(text),
        "answer": text,
        "supports": tfds.features.Sequence(text),
    }

  def example(self, record: data.WikiHopRecord):
    return record.id, record.to_json()
