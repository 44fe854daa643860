"""Tests for tasks.pretrain.tfds_dataset: the text builder from a manual
dir, reading a prepared TFDS text dataset by name into sentences, and the
errors for one that is not prepared."""

import pytest
import tensorflow as tf

from etc_realformer.errors import UserInputError
from tasks.common.inputs import record_stats
from tasks.pretrain import tfds_dataset


def test_sentences_of_wiki40b_style_text():
  text = ("_START_ARTICLE_\nA Title\n_START_SECTION_\nHistory\n"
          "_START_PARAGRAPH_\nIt began in 1900. It grew fast!_NEWLINE_"
          "Then it ended.")
  out = tfds_dataset.sentences_of_texts(tf.constant([text, "One. Two."]))
  assert out.to_list() == [[b"It began in 1900.", b"It grew fast!",
                            b"Then it ended."], [b"One.", b"Two."]]


def test_builder_and_reader(tmp_path):
  manual = tmp_path / "manual"
  manual.mkdir()
  (manual / "train.txt").write_text(
      "First doc, one.\nFirst doc, two.\n\nSecond doc. Two here.\n")
  (manual / "valid.txt").write_text("Held out.\n")
  data_dir = str(tmp_path / "tfds")
  builder = tfds_dataset.EtcPretrainText(data_dir=data_dir)
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
      manual_dir=str(manual)))
  assert builder.info.splits["train"].num_examples == 2
  stats = record_stats.RecordStats(input_file="tfds")
  docs = list(tfds_dataset.read_documents(
      "etc_pretrain_text", "train", stats, data_dir=data_dir))
  assert sorted(d.sentences for d in docs) == [
      ["First doc, one.", "First doc, two."],
      ["Second doc.", "Two here."]]
  assert docs[0].doc_id.startswith("etc_pretrain_text:train:")
  assert stats.examples_read == 2
  with pytest.raises(UserInputError, match="no feature 'body'"):
    list(tfds_dataset.read_documents("etc_pretrain_text", "train", stats,
                                     data_dir=data_dir,
                                     text_feature="body"))
  with pytest.raises(UserInputError, match="not prepared"):
    list(tfds_dataset.read_documents("etc_pretrain_text", "train", stats,
                                     data_dir=str(tmp_path / "empty")))
