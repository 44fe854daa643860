"""Tests for tasks.openkp.evaluate (the official metric) and its in-graph
twin `task.keyphrase_scores`, on hand-computed cases."""

import json
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tasks.openkp import evaluate as E
from tasks.openkp import task as T


def test_one_document_by_hand():
  # Gold {a, b, c}; predictions a (hit), x, b (hit), y, c (hit).
  p, r, f = E.score_document(["a", "x", "b", "y", "c"], ["a", "b", "c"])
  assert p == pytest.approx([1, 1 / 2, 2 / 3, 2 / 4, 3 / 5])
  assert r == pytest.approx([1 / 3, 1 / 3, 2 / 3, 2 / 3, 1])
  # F1@1 = 2 * 1 * 1/3 / (4/3) = 0.5; F1@3 = 2/3; F1@5 = 2*.6/1.6 = 0.75.
  assert [f[0], f[2], f[4]] == pytest.approx([0.5, 2 / 3, 0.75])


def test_fewer_predictions_still_divide_by_k():
  p, r, f = E.score_document(["a"], ["a"])
  assert p == pytest.approx([1, 1 / 2, 1 / 3, 1 / 4, 1 / 5])
  assert r == [1.0] * 5
  assert f[2] == pytest.approx(2 * (1 / 3) / (4 / 3))  # 0.5


def test_averaged_per_document_with_official_normalization():
  references = {
      "u1": [["Machine", "Learning"], ["TF"]],
      "u2": [["x"]],
      "u3": [["gold"]],          # no prediction at all: scores 0
      "u4": [[""], []],          # no usable gold: left out
  }
  predictions = {
      # Case-insensitive; "learning " is right-stripped; [""] is dropped.
      "u1": [[""], ["machine learning "], ["tf"]],
      "u2": [["y"], ["x"]],
  }
  out = E.evaluate(references, predictions)
  assert out["num_documents"] == 3
  assert out["missing_predictions"] == 1 and out["empty_references"] == 1
  # u1: hits at ranks 1, 2 of 2 gold; u2: hit at rank 2 of 1 gold; u3: none.
  assert out["precision@1"] == pytest.approx((1 + 0 + 0) / 3)
  assert out["recall@1"] == pytest.approx((0.5 + 0 + 0) / 3)
  assert out["f1@1"] == pytest.approx((2 / 3 + 0 + 0) / 3)
  assert out["precision@3"] == pytest.approx((2 / 3 + 1 / 3 + 0) / 3)
  assert out["recall@3"] == pytest.approx((1 + 1 + 0) / 3)
  assert out["f1@3"] == pytest.approx((0.8 + 0.5 + 0) / 3)
  assert out["precision@5"] == pytest.approx((2 / 5 + 1 / 5 + 0) / 3)
  assert out["f1@5"] == pytest.approx(
      (2 * 0.4 / 1.4 + 2 * 0.2 / 1.2 + 0) / 3)


def test_in_graph_scores_equal_the_official_ones():
  rng = random.Random(0)
  vocab = ["a", "b", "c", "d", "e", "f", "g"]
  phrases, golds, rows = [], [], []
  for _ in range(40):
    predicted = rng.sample(vocab, rng.randint(0, 5))
    gold = rng.sample(vocab, rng.randint(1, 3))
    p, r, f = E.score_document(predicted, gold)
    rows.append([p[k - 1] for k in E.DEPTHS] + [r[k - 1] for k in E.DEPTHS] +
                [f[k - 1] for k in E.DEPTHS])
    phrases.append(predicted + [""] * (5 - len(predicted)))
    golds.append(gold + [""] * (3 - len(gold)))
  scores, weight = T.keyphrase_scores(tf.constant(phrases),
                                      tf.constant(golds))
  got = np.stack([scores[n].numpy() for n in T.METRIC_NAMES], axis=1)
  np.testing.assert_allclose(got, np.array(rows), rtol=1e-6)
  assert weight.numpy().tolist() == [1.0] * 40
  # No gold: weight 0; a repeated gold phrase counts once.
  scores, weight = T.keyphrase_scores(tf.constant([["a", "", "", "", ""]]),
                                      tf.constant([["", ""]]))
  assert weight.numpy().tolist() == [0.0]
  scores, _ = T.keyphrase_scores(tf.constant([["a", "", "", "", ""]]),
                                 tf.constant([["a", "a"]]))
  assert scores["recall_at_1"].numpy().tolist() == [1.0]


def test_cli_scores_files(tmp_path):
  ref = tmp_path / "ref.jsonl"
  pred = tmp_path / "pred.jsonl"
  ref.write_text(json.dumps({"url": "u", "text": "t",
                             "KeyPhrases": [["a", "b"]]}) + "\n")
  pred.write_text(json.dumps({"url": "u", "KeyPhrases": [["a b"]]}) + "\n")
  assert E.evaluate_files(str(ref), str(pred))["f1@1"] == 1.0
  out = tmp_path / "m.json"
  proc = subprocess.run(
      [sys.executable, "-m", "tasks.openkp.evaluate", f"--reference={ref}",
       f"--predictions={pred}", f"--output={out}"],
      capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert json.loads(out.read_text())["precision@1"] == 1.0
