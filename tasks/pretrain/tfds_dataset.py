"""Pre-training documents from TensorFlow Datasets.

Two things:

* `read_documents(name, split, ...)`: the documents of any TFDS text
  dataset the user has (e.g. `wikipedia/20230601.en`, `wiki40b/en`), by name and
  split, from `data_dir`. Preparing is the user's choice (`download=True` runs
  TFDS's `download_and_prepare`, with `manual_dir` for datasets that need one);
  by default a dataset that is not prepared is an error that says so, never a
  silent multi-gigabyte download. Each record's `text_feature` is cleaned of
  wiki40b's structure markers, cut into paragraphs at newlines and into
  sentences by `tasks.common.featurization.tokenization.split_sentences` (a
  regex, no model download), batched in the graph.
* the builder `EtcPretrainText` ("etc_pretrain_text"): plain-text files in
  BERT's format (`data.py`) from `manual_dir` as a TFDS dataset with one
  record per document (`text`: its sentences, one a line), splits
  `train` (`train*.txt[.gz]`) and `validation` (`valid*`/`dev*`), so a
  corpus can be shared and versioned like any TFDS dataset.

`python -m tasks.pretrain.preprocess --tfds_name=...` uses `read_documents`.
"""

import glob
import os
from typing import Iterator, Optional

import tensorflow as tf
import tensorflow_datasets as tfds

from etc_realformer.errors import UserInputError
from tasks.common.featurization import tokenization
from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.common.inputs import tfds_files
from tasks.pretrain import data

# wiki40b's structure markers: titles are dropped, paragraphs and line
# breaks become newlines.
_MARKERS = ((r"_START_(ARTICLE|SECTION)_\n[^\n]*(\n|$)", "\n"),
            (r"_START_PARAGRAPH_\n", "\n"),
            (r"_NEWLINE_", "\n"))
_BATCH = 64


def sentences_of_texts(texts: tf.Tensor) -> tf.RaggedTensor:
  """<string>[D] document texts -> <string>[D, (sentences)] (markers
  cleaned, paragraphs at newlines, `split_sentences` within them)."""
  for pattern, rewrite in _MARKERS:
    texts = tf.strings.regex_replace(texts, pattern, rewrite)
  paragraphs = tf.strings.split(texts, "\n")
  sentences = tokenization.split_sentences(paragraphs.flat_values)
  return tf.RaggedTensor.from_row_splits(
      sentences, paragraphs.row_splits).merge_dims(1, 2)


def read_documents(name: str, split: str,
                   stats: record_stats.RecordStats,
                   data_dir: Optional[str] = None,
                   manual_dir: Optional[str] = None,
                   download: bool = False,
                   text_feature: str = "text") -> Iterator[data.Document]:
  """Yields the documents of a TFDS text dataset (see the module docstring).

  Args:
    name: the dataset (with config/version), e.g. "wikipedia/20230601.en".
    split: e.g. "train" or "train[:1%]".
    stats: bad records (undecodable or empty text) are counted here, or
      fail with `stats.strict`; `examples_read` counts the records.
    data_dir: where the prepared dataset is (TFDS's default if None).
    manual_dir: for `download`: where manually downloaded files are.
    download: run `download_and_prepare` first.
    text_feature: the record's text field.

  Raises:
    UserInputError: unknown dataset, not prepared (without `download`), no
      such split or feature.
    input_errors.BadRecordError: in strict mode, the first bad record.
  """
  try:
    builder = tfds.builder(name, data_dir=data_dir)
  except Exception as e:  # TFDS raises several types for unknown names.
    raise UserInputError(f"TFDS dataset {name!r}: {e}") from e
  if download:
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
  elif not builder.is_prepared():
    raise UserInputError(
        f"TFDS dataset {name!r} is not prepared in "
        f"{data_dir or 'the default data_dir'}; prepare it (tfds build, or "
        "--tfds_download) or pass --tfds_data_dir")
  features = builder.info.features
  if text_feature not in features:
    raise UserInputError(f"TFDS dataset {name!r} has no feature "
                         f"{text_feature!r} (it has {sorted(features)})")
  try:
    ds = builder.as_dataset(split=split, shuffle_files=False)
  except (ValueError, KeyError) as e:
    raise UserInputError(f"TFDS dataset {name!r}: split {split!r}: {e}") \
        from e
  ds = ds.map(lambda ex: ex[text_feature]).batch(_BATCH)
  source = f"{name}:{split}"
  index = 0
  for texts in ds:
    raw = texts.numpy()
    good = []
    for value in raw:
      stats.examples_read += 1
      try:
        text = value.decode("utf-8")
      except UnicodeDecodeError as e:
        stats.handle_bad_record(input_errors.BadRecordError(
            source, f"#{index}", text_feature, data.UNDECODABLE_TEXT,
            f"not UTF-8 at byte {e.start}"))
        index += 1
        continue
      if not text.strip():
        stats.handle_bad_record(input_errors.BadRecordError(
            source, f"#{index}", text_feature, input_errors.EMPTY_TEXT))
        index += 1
        continue
      good.append((index, text))
      index += 1
    if not good:
      continue
    split_docs = sentences_of_texts(tf.constant([t for _, t in good]))
    for (doc_index, _), sentences in zip(good, split_docs.to_list()):
      yield data.Document(f"{source}:{doc_index}",
                          [s.decode("utf-8") for s in sentences])


class EtcPretrainText(tfds_files.ManualFilesBuilder):
  """Plain-text files in BERT's format as a TFDS dataset (one record per
  document)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Documents of BERT-format text files."}
  DESCRIPTION = ("Documents of plain-text files in BERT's pre-training "
                 "format, for ETC pre-training.")
  MANUAL_DOWNLOAD_INSTRUCTIONS = """\
Put the corpus in manual_dir as text files in BERT's format (one sentence
per line, a blank line between documents; .gz allowed): train*.txt[.gz] for
the train split and valid*.txt[.gz] or dev*.txt[.gz] for validation.
"""
  # Glob patterns per split (the base's SPLIT_FILES names one file each).
  SPLIT_PATTERNS = {"train": ("train*.txt", "train*.txt.gz"),
                    "validation": ("valid*.txt", "valid*.txt.gz", "dev*.txt",
                                   "dev*.txt.gz")}
  read_records = staticmethod(data.read_documents)

  def features(self):
    return {"id": tfds.features.Text(), "text": tfds.features.Text()}

  def example(self, document: data.Document):
    return document.doc_id, {"id": document.doc_id,
                             "text": "\n".join(document.sentences)}

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    manual = os.fspath(dl_manager.manual_dir)
    splits = {}
    for split, patterns in self.SPLIT_PATTERNS.items():
      files = sorted(f for p in patterns
                     for f in glob.glob(os.path.join(manual, p)))
      if files:
        splits[split] = self._generate_examples(files)
    if "train" not in splits:
      raise input_errors.InputFileError(
          f"no train*.txt in manual_dir {manual}. "
          f"{self.MANUAL_DOWNLOAD_INSTRUCTIONS}")
    return splits
