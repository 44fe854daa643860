"""Tests for tasks.wikihop.client: `serve_raw_batch`'s inputs from qangaroo
records (padded, with counts; the supports split as `split_supports`), the
REST request, reading the outputs back, and a client without TensorFlow.
(The signature's answers for these inputs: `serving_test.py`.)"""

import dataclasses
import json
import os
import subprocess
import sys
from typing import List

import numpy as np

from tasks.wikihop import client
from tasks.wikihop import features as wikihop_features

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

RECORDS = [
    {"id": "WH_1", "query": "country_of x", "answer": "oslo",
     "candidates": ["Oslo", "rome", "lima"],
     "supports": ["X lives in Oslo. It is cold.", "", "Rome is old."]},
    {"id": "WH_2", "query": "located_in y", "candidates": ["paris", "quito"],
     "supports": ["Y is in Quito, Ecuador. Dr. Z said so. Yes."]},
]


@dataclasses.dataclass
class _Record:  # The fields of a `data.WikiHopRecord` the client reads.
  query: str
  candidates: List[str]
  supports: List[str]


def test_batch_inputs_pad_the_records_and_count_them():
  inputs = client.batch_inputs(RECORDS)
  assert list(inputs) == list(client.INPUTS)
  assert inputs["query"].tolist() == ["country_of x", "located_in y"]
  assert inputs["candidates"].tolist() == [["Oslo", "rome", "lima"],
                                           ["paris", "quito", ""]]
  assert inputs["num_candidates"].tolist() == [3, 2]
  # The supports split by Punkt, as `split_supports` (and preprocessing).
  splits = [wikihop_features.split_supports(r["supports"]) for r in RECORDS]
  assert [n for _, n in splits] == [[2, 0, 1], [3]]
  assert inputs["num_supports"].tolist() == [3, 1]
  assert inputs["num_sentences"].tolist() == [[2, 0, 1], [3, 0, 0]]
  assert inputs["sentences"].tolist() == [
      splits[0][0], splits[1][0]]
  assert inputs["sentences"].shape == (2, 3)
  for name in ("num_candidates", "num_sentences", "num_supports"):
    assert inputs[name].dtype == np.int32, name
  # Record objects and bytes read alike.
  objects = [_Record(r["query"].encode(), r["candidates"],
                     [s.encode() for s in r["supports"]]) for r in RECORDS]
  again = client.batch_inputs(objects)
  for name, value in inputs.items():
    np.testing.assert_array_equal(again[name], value, err_msg=name)


def test_predict_request_is_tf_serving_json():
  request = json.loads(json.dumps(client.predict_request(RECORDS)))
  assert request["signature_name"] == "serve_raw_batch"
  inputs = client.batch_inputs(RECORDS)
  assert sorted(request["inputs"]) == sorted(inputs)
  for name, value in inputs.items():
    assert request["inputs"][name] == value.tolist(), name
  assert client.predict_request(RECORDS[:1], "other")["signature_name"] == (
      "other")


def test_answers_cut_each_record_to_its_candidates():
  inputs = client.batch_inputs(RECORDS)
  outputs = {"answer": np.array([b"rome", b"quito"], object),
             "candidate_probabilities": np.array(
                 [[0.2, 0.5, 0.3], [0.4, 0.6, 0.0]], np.float32)}
  read = client.answers(outputs, inputs)
  assert [r["answer"] for r in read] == ["rome", "quito"]
  np.testing.assert_allclose(read[0]["candidate_probabilities"],
                             [0.2, 0.5, 0.3])
  np.testing.assert_allclose(read[1]["candidate_probabilities"], [0.4, 0.6])
  # A REST response's `outputs` (lists of str) read alike.
  rest = {k: v.tolist() for k, v in outputs.items()}
  rest["answer"] = ["rome", "quito"]
  assert client.answers(rest, inputs) == read


def test_works_without_tensorflow():
  script = """
import importlib.abc, json, sys

class NoTensorFlow(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path=None, target=None):
    if name.partition(".")[0] in ("tensorflow", "tensorflow_text"):
      raise ImportError(name + " is not importable here")

sys.meta_path.insert(0, NoTensorFlow())
from tasks.wikihop import client
inputs = client.batch_inputs(json.loads(sys.argv[1]))
print(json.dumps(inputs["num_sentences"].tolist()))
"""
  proc = subprocess.run(
      [sys.executable, "-c", script, json.dumps(RECORDS)], cwd=REPO,
      env=dict(os.environ, PYTHONPATH=REPO), capture_output=True, text=True,
      timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert json.loads(proc.stdout) == [[2, 0, 1], [3, 0, 0]]
