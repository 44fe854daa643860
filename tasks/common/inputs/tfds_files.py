"""The base of the TFDS builders of released files (`tasks/*/tfds_dataset.py`).

The released files of WikiHop, HotpotQA, NQ and OpenKP are downloaded by
hand (their terms, or their size), so a builder reads them from the
`manual_dir` of the download config: each split's file is looked for in
`manual_dir` and its `SUBDIRS` (`input_files.find_manual_file`), read with the
task's reader, bad records skipped and logged once
(`record_stats.skipping_bad_records`), each valid record yielded as an example.

Only the TFDS builders import this module (tensorflow-datasets is optional).
Importing it also makes prepared datasets readable under protobuf 7
(`_restore_info_under_protobuf_7`).
"""

from typing import (Any, Callable, ClassVar, Dict, Iterator, Mapping, Sequence,
                    Tuple)

import tensorflow_datasets as tfds
from tensorflow_datasets.core import dataset_info

from tasks.common.inputs import input_files
from tasks.common.inputs import record_stats


def _restore_info_under_protobuf_7() -> None:
  """Lets tensorflow-datasets 4.9 read a prepared dataset under protobuf 7.

  When TFDS restores a prepared dataset's info (any `tfds.builder(name,
  data_dir=...)` of a prepared dataset, `tfds.load`, `builder_from_directory`)
  it copies each scalar field that the file sets and the builder's code does
  not, telling repeated ones by `FieldDescriptor.label`, which protobuf 7
  removed (`is_repeated` replaces it): reading fails with "'FieldDescriptor'
  object has no attribute 'label'". Copying those fields first, here, the
  same way, gives the same info and leaves TFDS nothing to copy there.
  """
  descriptor = dataset_info.dataset_info_pb2.DatasetInfo.DESCRIPTOR
  if hasattr(descriptor.fields[0], "label"):  # protobuf < 7: nothing to do.
    return
  read = dataset_info.DatasetInfo.read_from_directory
  if getattr(read, "copies_scalar_fields", False):
    return

  def is_set(proto, name):
    try:
      return proto.HasField(name)
    except ValueError:  # Repeated, or a proto3 scalar without presence.
      return bool(getattr(proto, name))

  def read_from_directory(self, dataset_info_dir):
    restored = dataset_info.read_from_json(
        dataset_info.dataset_info_path(dataset_info_dir))
    proto = self.as_proto
    for field in descriptor.fields:
      if (field.type == field.TYPE_MESSAGE or is_set(proto, field.name) or
          not is_set(restored, field.name)):
        continue
      value = getattr(restored, field.name)
      if field.is_repeated:
        getattr(proto, field.name).extend(value)
      else:
        setattr(proto, field.name, value)
    return read(self, dataset_info_dir)

  read_from_directory.copies_scalar_fields = True
  dataset_info.DatasetInfo.read_from_directory = read_from_directory


_restore_info_under_protobuf_7()


class ManualFilesBuilder(tfds.core.GeneratorBasedBuilder,
                         skip_registration=True):
  """A builder of released files from `manual_dir`.

  Subclasses set `MANUAL_DOWNLOAD_INSTRUCTIONS`, `SPLIT_FILES` ({split: file
  name}), `SUBDIRS` (folders of `manual_dir` to look in, "" = itself),
  `read_records` (the task's reader: `(path, stats=...)` -> records), the
  `DESCRIPTION`, `HOMEPAGE` and `CITATION` of the dataset info, and implement
  `features()` (the example's features) and `example(record)`.
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
    paths = input_files.find_manual_files(dl_manager.manual_dir,
                                          self.SPLIT_FILES, self.SUBDIRS,
                                          self.MANUAL_DOWNLOAD_INSTRUCTIONS)
    return {split: self._generate_examples(path)
            for split, path in paths.items()}

  def _generate_examples(self, path: str):
    for record in record_stats.skipping_bad_records(path, self.read_records):
      yield self.example(record)
