"""Natural Questions' serving signatures: `serve_raw_batch` and
`serve_text_batch` equal `serve_raw` and `serve_text` document by document
(all the documents' windows through the model in one call) and reject
counts that disagree with their padded inputs; the export README documents
the signatures and the ops they need.

One trace of the signatures and one set of answers, made by the module's
fixture (the tests' autouse reseeding clears TensorFlow's kernel caches:
every test that ran a signature would instantiate it again). The export
itself is served in `e2e_test.py`.
"""

import random

import numpy as np
import pytest

from demos.nq import synthetic
from etc_realformer import EtcConfig
import serving_testing
from tasks.nq import task as nq_task
from tokenization_testing import write_test_vocab

L, G, STRIDE, QUESTION = 48, 16, 24, 8


def _documents():
  """Three synthetic documents of different lengths; the third is sent
  without candidates (they come from its HTML tags)."""
  rng = random.Random(7)
  docs = [synthetic.make_example(rng, i, 1, num_filler=n)
          for i, n in enumerate((1, 3, 0))]
  out = []
  for i, doc in enumerate(docs):
    candidates = [] if i == 2 else doc["long_answer_candidates"]
    out.append({
        "question": np.array(doc["question_text"], object),
        "doc_tokens": np.array([t["token"] for t in doc["document_tokens"]],
                               object),
        "doc_token_is_html": np.array(
            [t["html_token"] for t in doc["document_tokens"]], bool),
        "candidate_starts": np.array([c["start_token"] for c in candidates],
                                     np.int32),
        "candidate_ends": np.array([c["end_token"] for c in candidates],
                                   np.int32),
        "candidate_top_level": np.array([c["top_level"] for c in candidates],
                                        bool)})
  return out


def _batch(documents):
  """serve_raw_batch's inputs: the documents padded, with their counts."""
  def rows(name, dtype, fill):
    return serving_testing.padded([d[name] for d in documents], dtype, fill)

  return {
      "question": np.array([d["question"].item() for d in documents],
                           object),
      "doc_tokens": rows("doc_tokens", object, ""),
      "doc_token_is_html": rows("doc_token_is_html", bool, False),
      "num_doc_tokens": np.array([len(d["doc_tokens"]) for d in documents],
                                 np.int32),
      "candidate_starts": rows("candidate_starts", np.int32, 0),
      "candidate_ends": rows("candidate_ends", np.int32, 0),
      "candidate_top_level": rows("candidate_top_level", bool, False),
      "num_candidates": np.array(
          [len(d["candidate_starts"]) for d in documents], np.int32),
  }


def _texts(documents):
  """The documents in the simplified format (tokens joined by spaces)."""
  return [{"question": d["question"],
           "document_text": np.array(" ".join(d["doc_tokens"]), object)}
          for d in documents]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  vocab_words = synthetic.vocabulary()
  vocab = write_test_vocab(tmp_path_factory.mktemp("v") / "vocab.txt",
                           vocab_words)
  config = EtcConfig(vocab_size=len(vocab_words) + 30, hidden_size=16,
                     num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, local_radius=4,
                     relative_pos_max_distance=2, relative_vocab_size=8,
                     residual_attention=True, initializer_range=0.3)
  task = nq_task.NaturalQuestionsTask(
      model_config=config, long_seq_len=L, global_seq_len=G, stride=STRIDE,
      max_question_len=QUESTION, vocab_file=vocab)
  model = task.build_model()
  model(task.dummy_features(), training=False)
  signatures = task.serving_signatures(model)
  documents = _documents()
  texts = _texts(documents)
  batch = _batch(documents)
  # Padded as TF Serving pads requests it batches (their first values).
  padded = serving_testing.tf_serving_padding(batch, {
      "doc_tokens": batch["num_doc_tokens"],
      "doc_token_is_html": batch["num_doc_tokens"],
      **{k: batch["num_candidates"] for k in (
          "candidate_starts", "candidate_ends", "candidate_top_level")}})
  text_batch = {k: np.array([t[k].item() for t in texts], object)
                for k in ("question", "document_text")}

  def call(name, inputs):
    return serving_testing.call(signatures[name], inputs)

  return {"signatures": signatures, "batch": batch,
          "raw": (call("serve_raw_batch", batch),
                  [call("serve_raw", d) for d in documents]),
          "padded": call("serve_raw_batch", padded),
          "text": (call("serve_text_batch", text_batch),
                   [call("serve_text", t) for t in texts])}


@pytest.mark.slow  # the fixture traces six signatures (~20-40 s)
def test_batches_equal_each_document_alone(served):
  for kind in ("raw", "text"):
    batch, singles = served[kind]
    # Documents of several windows, of different counts.
    assert len({int(s["num_windows"]) for s in singles}) > 1, kind
    serving_testing.assert_batch_equals_records(batch, singles, padding={})
  # The padding's values are ignored.
  serving_testing.assert_same_outputs(served["padded"], served["raw"][0],
                                      "padded")
  # Found from the HTML tags: the third document answers alike both ways.
  assert served["raw"][0]["long_start_token"][2] == served["text"][0][
      "long_start_token"][2]


def test_bad_batch_fails_naming_the_input(served):
  """Counts past the padded inputs fail the request (one test: each
  failure after reseeding re-instantiates the signature)."""
  good = served["batch"]
  cases = [
      ("num_doc_tokens", good["num_doc_tokens"] + np.int32(1),
       "`num_doc_tokens` exceeds the padded length"),
      ("num_candidates", good["num_candidates"] - np.int32([0, 0, 1]),
       "`num_candidates` must be >= 0"),
      ("num_candidates", good["num_candidates"] + np.int32([0, 0, 1]) * 1000,
       "`num_candidates` exceeds the padded length"),
      ("doc_tokens", good["doc_tokens"][:2], "`doc_tokens` must have one"),
  ]
  serving_testing.assert_bad_inputs_named(
      served["signatures"]["serve_raw_batch"], good, cases)


def test_readme_documents_the_signatures_and_their_ops(served):
  serving_testing.assert_readme_documents_signatures_and_ops(
      "Natural Questions", served["signatures"], {"L": L, "G": G})