"""WikiHop's export as a server sees it: `serve_raw_batch` equals
`serve_raw` record by record and rejects counts that disagree with its
padded inputs; the export README documents the signatures and the ops; a
fresh process with only tensorflow and tensorflow_text serves every
signature as this one does.

One tiny export and one set of in-process answers, made by the module's
fixture: the tests' autouse reseeding clears TensorFlow's kernel caches,
so every test that ran a signature would pay its instantiation again.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.data import tfrecords
from etc_realformer.export import ops
import serving_testing
from tasks.wikihop import client
from tasks.wikihop import features as wikihop_features
from tasks.wikihop import task as wikihop_task
import wikihop_testing

L, G = wikihop_testing.L, wikihop_testing.G


def _records(data_dir: str):
  """Three dev records of different sizes: as written (4 candidates, 4
  supports); 2 candidates and 2 supports; G candidates (as many as the
  global input holds) and a blank support."""
  with open(f"{data_dir}/dev.json") as f:
    first, second, third = json.load(f)[:3]
  second["candidates"] = second["candidates"][:1] + [second["answer"]]
  second["supports"] = second["supports"][:2]
  third["candidates"] += [f"ent{i}" for i in range(30)
                          if f"ent{i}" not in third["candidates"]][:G - 4]
  third["supports"].insert(1, "")
  return [first, second, third]


def _one_record(record):
  """`serve_raw`'s inputs: the supports split by Punkt, as a client does."""
  sentences, num_sentences = wikihop_features.split_supports(
      record["supports"])
  return {"query": np.array(record["query"], object),
          "candidates": np.array(record["candidates"], object),
          "sentences": np.array(sentences, object),
          "num_sentences": np.array(num_sentences, np.int32)}


def _stored(task):
  """serving_default's and serve_examples' inputs: the hand-made features
  of two records (at L, G), as tensors and as stored tf.Examples."""
  stored = {k: v.numpy() for k, v in wikihop_testing.two_records().items()}
  examples = []
  for b, num_candidates in enumerate((3, 2)):
    example = {k: v[b] for k, v in stored.items()}
    example["candidates"] = example["candidates"][:num_candidates]
    example["num_candidates"] = num_candidates
    examples.append(tfrecords.to_tf_example(
        example, task.feature_spec()).SerializeToString())
  return ({k: stored[k] for k in task.model_features()},
          {"examples": np.array(examples, object)})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  root = tmp_path_factory.mktemp("wikihop_serving")
  data_dir = str(root / "data")
  wikihop_testing.write_tiny_wikihop(data_dir, num_train=0, num_dev=3)
  # The unit tests' 1-layer config; a wider init than the default so that
  # the untrained candidates' probabilities are apart.
  config = wikihop_testing.tiny_task().model_config.replace(
      vocab_size=120, initializer_range=0.3)
  task = wikihop_task.WikiHopTask(model_config=config, long_seq_len=L,
                                  global_seq_len=G,
                                  vocab_file=f"{data_dir}/vocab.txt")
  signatures, path = serving_testing.export(task, task.build_model(),
                                            str(root / "export"))
  records = _records(data_dir)
  features, examples = _stored(task)
  batch = client.batch_inputs(records)
  calls = {
      "default": ("serving_default", features),
      "examples": ("serve_examples", examples),
      "batch": ("serve_raw_batch", batch),
      # Padded as TF Serving pads requests it batches (their first values).
      "padded": ("serve_raw_batch", serving_testing.tf_serving_padding(
          batch, {"candidates": batch["num_candidates"],
                  "num_sentences": batch["num_supports"],
                  "sentences": batch["num_sentences"].sum(axis=1)})),
      **{f"record{i}": ("serve_raw", _one_record(r))
         for i, r in enumerate(records)},
  }
  answers = {label: serving_testing.call(signatures[name], inputs)
             for label, (name, inputs) in calls.items()}
  return {"root": root, "signatures": signatures, "path": path,
          "records": records, "calls": calls, "answers": answers}


def test_batch_equals_each_record_alone(served):
  answers = served["answers"]
  batch = answers["batch"]
  singles = [answers[f"record{i}"] for i in range(3)]
  assert [len(s["candidate_probabilities"]) for s in singles] == [4, 2, G]
  assert batch["candidate_probabilities"].shape == (3, G)
  serving_testing.assert_batch_equals_records(
      batch, singles, padding={"candidate_probabilities": 0.0})
  # The padding's values are ignored.
  serving_testing.assert_same_outputs(answers["padded"], batch, "padded")
  # The client's reading of the outputs: one answer per record, one
  # probability per candidate sent.
  read = client.answers(batch, served["calls"]["batch"][1])
  assert [r["answer"] for r in read] == [
      s["answer"].item().decode() for s in singles]
  for r, record in zip(read, served["records"]):
    assert r["answer"] in record["candidates"]
    assert len(r["candidate_probabilities"]) == len(record["candidates"])


def _int(values):
  return np.array(values, np.int32)


def test_bad_batch_fails_naming_the_input(served):
  """Counts past the padded inputs fail the request (one test: each
  failure after reseeding re-instantiates the signature)."""
  good = served["calls"]["batch"][1]
  one_more = np.zeros_like(good["num_sentences"])
  one_more[2, 0] = 1
  cases = [
      ("num_candidates", good["num_candidates"] + _int([0, 0, 1]),
       "`num_candidates` exceeds the padded length"),
      ("num_supports", good["num_supports"] + _int([0, 0, 1]),
       "`num_supports` exceeds the padded length"),
      ("num_sentences", good["num_sentences"] + one_more,
       "the sum of `num_sentences` over a record exceeds the padded length"),
      ("num_sentences", good["num_sentences"] - 5 * one_more,
       "`num_sentences` must be >= 0"),
      ("query", good["query"][:2], "`candidates` must have one row"),
  ]
  serving_testing.assert_bad_inputs_named(
      served["signatures"]["serve_raw_batch"], good, cases)


def test_records_that_cannot_be_answered_whole_are_refused(served):
  """More candidates than G (preprocessing's `too_long`), none, sentence
  counts that disagree with the sentences, text that is not UTF-8: an
  error naming the input (and the record of a batch), never an answer
  from the candidates that fit."""
  good = served["calls"]["record0"][1]
  many = np.array([f"ent{i}" for i in range(G + 1)], object)
  cases = [
      ("candidates", many, rf"more `candidates` than the global input "
       rf"holds: the answer would be chosen among the first {G} only.*"
       rf"{G + 1}.*global_seq_len.*{G}"),
      ("candidates", np.array([], object), "`candidates` is empty"),
      ("num_sentences", good["num_sentences"] + _int([1, 0, 0, 0]),
       "the sum of `num_sentences` must equal the number of `sentences`"),
      ("query", np.array(b"country \xff", object),
       "`query` is not valid UTF-8"),
  ]
  serving_testing.assert_bad_inputs_named(served["signatures"]["serve_raw"],
                                          good, cases)
  # A batch names the record: its second has G + 1 candidates.
  batch = dict(served["calls"]["batch"][1])
  candidates = np.full([3, G + 1], "", object)
  candidates[:, :batch["candidates"].shape[1]] = batch["candidates"]
  candidates[1] = many
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"serve_raw_batch: more `candidates`.*record\] "
                           rf"\[1\] \[candidates\] \[{G + 1}\]"):
    serving_testing.call(
        served["signatures"]["serve_raw_batch"],
        {**batch, "candidates": candidates,
         "num_candidates": batch["num_candidates"] + _int([0, G - 1, 0])})


def test_readme_documents_the_signatures(served):
  serving_testing.assert_readme_documents(
      "WikiHop", serving_testing.signature_specs(served["path"]),
      {"L": L, "G": G})


def test_readme_lists_the_ops_not_in_core_tensorflow(served):
  by_signature = ops.signature_op_types(served["path"])
  custom = ops.not_in_core(ops.all_op_types(served["path"]))
  listed_ops, listed_signatures = serving_testing.readme_ops("WikiHop")
  assert sorted(custom) == list(listed_ops)
  assert sorted(k for k, v in by_signature.items() if v & custom) == list(
      listed_signatures)


def test_fresh_process_serves_every_signature(served):
  """With only tensorflow and tensorflow_text (no project code): the same
  answers through every signature; TensorFlow alone lacks exactly the ops
  `ops.not_in_core` names, and loads nothing without them."""
  all_ops = ops.all_op_types(served["path"])
  calls = {k: v for k, v in served["calls"].items()
           if k in ("default", "examples", "batch", "record2")}
  report, outputs = serving_testing.serve_in_fresh_process(
      served["path"], calls, str(served["root"]), all_ops)
  assert report["signatures"] == ["serve_examples", "serve_raw",
                                  "serve_raw_batch", "serving_default"]
  assert report["project_modules"] == []
  for label in calls:
    serving_testing.assert_same_outputs(outputs[label],
                                        served["answers"][label], label)
  assert sorted(report["unregistered"]) == sorted(ops.not_in_core(all_ops))
  assert "Op type not registered" in report["without_text"]
