"""The base of the TFDS builders of released files (`tasks/*/tfds_dataset.py`).

The released files of WikiHop, HotpotQA, NQ and OpenKP are downloaded by
hand (their terms, or their size), so a builder reads them from the
`manual_dir` of the download config: each split's file is looked for in
`manual_dir` and its `SUBDIRS` (`records.find_manual_file`), read with the
task's reader, bad records skipped and logged once
(`records.skipping_bad_records`), each valid record yielded as an example.

Only the TFDS builders import this module (tensorflow-datasets is optional).
"""

from typing import (Any, Callable, ClassVar, Dict, Iterator, Mapping,
                    Sequence, Tuple)

import tensorflow_datasets as tfds

from tasks.common import records


class ManualFilesBuilder(tfds.core.GeneratorBasedBuilder,
                         skip_registration=True):
  """A builder of released files from `manual_dir`.

  Subclasses set `MANUAL_DOWNLOAD_INSTRUCTIONS`, `SPLIT_FILES` ({split: file
  name}), `SUBDIRS` (folders of `manual_dir` to look in, "" = itself),
  `read_records` (the task's reader: `(path, stats=...)` -> records), the
  `DESCRIPTION`, `HOMEPAGE` and `CITATION` of the dataset info, and implement
  `features()` (the example layout) and `example(record)`.
  """

  SPLIT_FILES: ClassVar[Mapping[str, str]] = {}
  SUBDIRS: ClassVar[Sequence[str]] = ("",)
  DESCRIPTION: ClassVar[str] = ""
  HOMEPAGE: ClassVar[str] = ""
  CITATION: ClassVar[str] = ""
  read_records: ClassVar[Callable[..., Iterator[Any]]]

  def features(self) -> Dict[str, Any]:
    """The examples' features: name -> a `tfds.features` feature."""
    raise NotImplementedError

  def example(self, record: Any) -> Tuple[str, Dict[str, Any]]:
    """A valid record -> its (unique key, `features()` values)."""
    raise NotImplementedError

  def _info(self) -> tfds.core.DatasetInfo:
    return self.dataset_info_from_configs(
        description=self.DESCRIPTION,
        features=tfds.features.FeaturesDict(self.features()),
        supervised_keys=None, homepage=self.HOMEPAGE,
        citation=self.CITATION)

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    paths = records.find_manual_files(dl_manager.manual_dir,
                                      self.SPLIT_FILES, self.SUBDIRS,
                                      self.MANUAL_DOWNLOAD_INSTRUCTIONS)
    return {split: self._generate_examples(path)
            for split, path in paths.items()}

  def _generate_examples(self, path: str):
    for record in records.skipping_bad_records(path, self.read_records):
      yield self.example(record)
