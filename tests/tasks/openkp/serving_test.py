"""OpenKP's serving signatures: `serve_raw_batch` equals `serve_raw`
document by document; both reject bad inputs (different batch sizes, a bad
VDOM) naming the input and record; the export README documents the
signatures and the ops they need.

One trace of the signatures and one set of answers, made by the module's
fixture (the tests' autouse reseeding clears TensorFlow's kernel caches:
every test that ran a signature would instantiate it again). The export
itself is served in `e2e_test.py`.
"""

import json
import random

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer import EtcConfig
import openkp_testing
import serving_testing
from tasks.openkp import task as openkp_task
from tokenization_testing import write_test_vocab

L, G = 24, 4


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  vocab = write_test_vocab(tmp_path_factory.mktemp("v") / "vocab.txt",
                           openkp_testing.VOCAB_WORDS)
  config = EtcConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32,
                     local_radius=4, relative_pos_max_distance=2,
                     relative_vocab_size=8, residual_attention=True)
  task = openkp_task.OpenKPTask(model_config=config, long_seq_len=L,
                                global_seq_len=G, vocab_file=vocab)
  model = task.build_model()
  model(task.dummy_features(), training=False)
  signatures = task.serving_signatures(model)
  rng = random.Random(3)
  # Documents of different sizes: a short one, a long one (cut to L words
  # and G elements), one with a single word.
  records = [openkp_testing.synthetic_record(rng, "u0", non_ascii=True),
             openkp_testing.make_record(
                 "u1", [[f"w{i}" for i in range(j, j + 9)]
                        for j in range(0, 40, 8)], None),
             openkp_testing.make_record("u2", [["kp3"]], None)]
  batch = {"text": np.array([r["text"] for r in records], object),
           "vdom": np.array([r["VDOM"] for r in records], object)}
  return {"signatures": signatures, "batch": batch,
          "batch_answers": serving_testing.call(
              signatures["serve_raw_batch"], batch),
          "record_answers": [serving_testing.call(
              signatures["serve_raw"],
              {"text": np.array(r["text"], object),
               "vdom": np.array(r["VDOM"], object)}) for r in records]}


def test_batch_equals_each_document_alone(served):
  singles = served["record_answers"]
  # The one-word document has one phrase; the others five.
  assert [int((s["lengths"] > 0).sum()) for s in singles] == [5, 5, 1]
  serving_testing.assert_batch_equals_records(served["batch_answers"],
                                              singles, padding={})


def test_bad_inputs_fail_naming_the_input_and_record(served):
  """Inputs of different batch sizes; a NaN VDOM number (it would empty
  every keyphrase) or VDOM text that is not the VDOM JSON (it would read as
  a page without elements). One test: each test instantiates the
  signatures it runs anew."""
  good = served["batch"]
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="`vdom` must have one row"):
    serving_testing.call(served["signatures"]["serve_raw_batch"],
                         {**good, "vdom": good["vdom"][:2]})
  elements = json.loads(good["vdom"][1])
  elements[0]["feature"][2] = float("nan")  # json writes NaN
  rows = good["vdom"].copy()
  rows[1] = json.dumps(elements)
  # Both kinds go through one parser (features_test checks each kind there).
  serving_testing.assert_bad_inputs_named(
      served["signatures"]["serve_raw_batch"], good,
      [("vdom", rows, "serve_raw_batch: `vdom` of record 1: a feature value "
                      "that is not a finite JSON number")])
  serving_testing.assert_bad_inputs_named(
      served["signatures"]["serve_raw"],
      {"text": np.array(good["text"][1], object)},
      [("vdom", np.array("plain text", object),
        "serve_raw: `vdom`: not a VDOM JSON array")])


def test_readme_documents_the_signatures_and_their_ops(served):
  serving_testing.assert_readme_documents_signatures_and_ops(
      "OpenKP", served["signatures"], {"L": L, "G": G})