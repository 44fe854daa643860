"""HotpotQA's serving signatures: `serve_raw_batch` equals `serve_raw`
record by record and rejects counts that disagree with its padded inputs;
the export README documents the signatures and the ops they need.

One trace of the signatures and one set of answers, made by the module's
fixture (the tests' autouse reseeding clears TensorFlow's kernel caches:
every test that ran a signature would instantiate it again). The export
itself is served in `e2e_test.py`; WikiHop's serving test serves one from
a fresh process.
"""

import numpy as np
import pytest

import hotpotqa_testing
import serving_testing
from tokenization_testing import write_test_vocab

L, G = hotpotqa_testing.L, hotpotqa_testing.G


def _records():
  """Three records of different sizes: 2 paragraphs (2 and 1 sentences);
  1 paragraph of 1 sentence; 3 paragraphs, too long for L (what is cut
  comes back as -1)."""
  return [
      hotpotqa_testing.record(),
      hotpotqa_testing.record(
          titles=("Paris",), sentences=(("Paris is the city of light.",),),
          supporting_facts=(("Paris", 0),)),
      hotpotqa_testing.record(
          titles=("John Doe", "Paris", "Bob"),
          sentences=(("John Doe was born in Paris.", "Bob is x."),
                     ("Paris is the city of light.",),
                     ("Bob is big.", "Bob was short.", "a b c d e f a b c",
                      "d e f a b c d e f"))),
  ]


def _one_record(record):
  return {"question": np.array(record.question, object),
          "titles": np.array(record.titles, object),
          "sentences": np.array([s for p in record.sentences for s in p],
                                object),
          "num_sentences": np.array([len(p) for p in record.sentences],
                                    np.int32)}


def _batch(records):
  return {
      "question": np.array([r.question for r in records], object),
      "titles": serving_testing.padded([r.titles for r in records], object,
                                       ""),
      "num_paragraphs": np.array([len(r.titles) for r in records], np.int32),
      "sentences": serving_testing.padded(
          [[s for p in r.sentences for s in p] for r in records], object,
          ""),
      "num_sentences": serving_testing.padded(
          [[len(p) for p in r.sentences] for r in records], np.int32, 0),
  }


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  vocab = write_test_vocab(tmp_path_factory.mktemp("v") / "vocab.txt",
                           hotpotqa_testing.WORDS)
  task = hotpotqa_testing.tiny_task(vocab, sp_threshold=0.0)
  model = task.build_model()
  model(task.dummy_features(), training=False)
  signatures = task.serving_signatures(model)
  records = _records()
  batch = _batch(records)
  # Padded as TF Serving pads requests it batches (their first values).
  padded = serving_testing.tf_serving_padding(
      batch, {"titles": batch["num_paragraphs"],
              "num_sentences": batch["num_paragraphs"],
              "sentences": batch["num_sentences"].sum(axis=1)})
  return {"signatures": signatures, "batch": batch,
          "batch_answers": serving_testing.call(
              signatures["serve_raw_batch"], batch),
          "padded_answers": serving_testing.call(
              signatures["serve_raw_batch"], padded),
          "record_answers": [serving_testing.call(signatures["serve_raw"],
                                                  _one_record(r))
                             for r in records]}


def test_batch_equals_each_record_alone(served):
  singles = served["record_answers"]
  assert [len(s["sentence_sp_probabilities"]) for s in singles] == [3, 1, 7]
  # The long record lost sentences to truncation: -1 inside its own row.
  assert (singles[2]["sentence_sp_probabilities"] == -1).any()
  batch = served["batch_answers"]
  assert batch["sentence_sp_probabilities"].shape == (3, 7)
  assert batch["title_sp_probabilities"].shape == (3, 3)
  serving_testing.assert_batch_equals_records(
      batch, singles, padding={k: -1.0 for k in (
          "sentence_sp_probabilities", "title_sp_probabilities",
          "paragraph_sp_probabilities")})
  # The padding's values are ignored.
  serving_testing.assert_same_outputs(served["padded_answers"], batch,
                                      "padded")


def test_bad_batch_fails_naming_the_input(served):
  """Counts past the padded inputs fail the request (one test: each
  failure after reseeding re-instantiates the signature)."""
  good = served["batch"]
  one_more = np.zeros_like(good["num_sentences"])
  one_more[2, 2] = 1
  cases = [
      ("num_paragraphs", good["num_paragraphs"] + np.int32([0, 0, 1]),
       "`num_paragraphs` exceeds the padded length"),
      ("num_sentences", good["num_sentences"] + one_more,
       "the sum of `num_sentences` over a record exceeds the padded length"),
      ("num_sentences", good["num_sentences"] - 5 * one_more,
       "`num_sentences` must be >= 0"),
      ("question", good["question"][:2], "`titles` must have one row"),
  ]
  serving_testing.assert_bad_inputs_named(
      served["signatures"]["serve_raw_batch"], good, cases)


def test_readme_documents_the_signatures_and_their_ops(served):
  serving_testing.assert_readme_documents_signatures_and_ops(
      "HotpotQA", served["signatures"], {"L": L, "G": G})