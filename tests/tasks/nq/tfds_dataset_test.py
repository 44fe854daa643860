"""Tests for tasks.nq.tfds_dataset: the TFDS natural_questions builder is
refused with what to download; TFDS examples with every field convert."""

import random

import numpy as np
import pytest

from demos.nq import synthetic
from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.nq import data
from tasks.nq import preprocess
from tasks.nq import tfds_dataset


def tfds_example(record):
  """A numpy TFDS-format example (with the fields TFDS 0.1.0 lacks)."""
  toks = record["document_tokens"]
  cands = record["long_answer_candidates"]
  anns = record["annotations"]

  def col(items, key, dtype=np.int64):
    return np.array([x[key] for x in items], dtype=dtype)

  return {
      "id": str(record["example_id"]).encode(),
      "question": {"text": record["question_text"].encode()},
      "document": {"url": b"u", "tokens": {
          "token": np.array([t["token"].encode() for t in toks]),
          "is_html": col(toks, "html_token", bool),
          "start_byte": col(toks, "start_byte"),
          "end_byte": col(toks, "end_byte")}},
      "long_answer_candidates": {
          **{k: col(cands, k) for k in ("start_token", "end_token",
                                        "start_byte", "end_byte")},
          "top_level": col(cands, "top_level", bool)},
      "annotations": {
          "id": np.array([str(a["annotation_id"]).encode() for a in anns]),
          "long_answer": {k: col([a["long_answer"] for a in anns], k)
                          for k in ("start_token", "end_token", "start_byte",
                                    "end_byte", "candidate_index")},
          "short_answers": {k: [col(a["short_answers"], k) for a in anns]
                            for k in ("start_token", "end_token",
                                      "start_byte", "end_byte")},
          # The TFDS ClassLabel: 0 NO, 1 YES, -1 none.
          "yes_no_answer": np.array([{"NO": 0, "YES": 1}.get(
              a["yes_no_answer"], -1) for a in anns])},
  }


def test_tfds_natural_questions_builder_is_refused_with_instructions(
    tmp_path):
  pytest.importorskip("tensorflow_datasets")
  with pytest.raises(tfds_dataset.TfdsFieldsMissingError) as e:
    tfds_dataset.check_tfds_builder("natural_questions",
                                    data_dir=str(tmp_path))
  for field in ("long_answer_candidates.top_level",
                "long_answer_candidates.start_byte",
                "document.tokens.start_byte",
                "annotations.long_answer.candidate_index"):
    assert field in e.value.missing and field in str(e.value)
  assert "nq-train-??.jsonl.gz" in str(e.value)
  assert isinstance(e.value, input_errors.InputFileError)
  assert not list(tmp_path.iterdir()) or all(
      not p.name.endswith(".tfrecord") for p in tmp_path.rglob("*"))


def test_preprocess_refuses_tfds_natural_questions_before_writing(tmp_path):
  pytest.importorskip("tensorflow_datasets")
  paths = synthetic.write_dataset(str(tmp_path / "syn"), 1, 1)
  featurizer = preprocess.make_featurizer(paths["vocab"], None, 64, 24, 24, 8)
  with pytest.raises(tfds_dataset.TfdsFieldsMissingError,
                     match="long_answer_candidates.top_level"):
    preprocess.preprocess_tfds("natural_questions:train",
                               str(tmp_path / "out"), featurizer,
                               data_dir=str(tmp_path / "tfds"))
  assert not (tmp_path / "out").exists()


def test_tfds_examples_with_every_field_convert():
  paths = list(tfds_dataset.REQUIRED_FIELDS) + ["document.html"]
  assert tfds_dataset.missing_fields(paths) == []
  assert tfds_dataset.missing_fields(["id"])[0] == "question.text"
  rng = random.Random(0)
  good = synthetic.make_example(rng, 11, num_annotations=1)
  bad = tfds_example(synthetic.make_example(rng, 12, num_annotations=1))
  del bad["long_answer_candidates"]
  stats = record_stats.RecordStats()
  got = list(tfds_dataset.records_from_tfds(
      [tfds_example(good), bad], "tfds-nq", stats=stats))
  assert stats.skipped == {input_errors.WRONG_TYPE: 1}
  (record,) = got
  expected = data.validate_record(
      dict(good, document_url="u"), "tfds-nq", 1)
  assert record == expected
