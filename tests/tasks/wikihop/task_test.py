"""Tests for tasks.wikihop.task: loss, metric, predictions, official scores
and signatures (no training)."""

import json

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.training import task as task_lib
from tasks.wikihop import head
from tasks.wikihop import task as wikihop_task
import wikihop_testing

G = wikihop_testing.G


def test_registered_under_its_name():
  assert task_lib.get_task_class("wikihop") is wikihop_task.WikiHopTask
  assert wikihop_testing.tiny_task().side_input_source == "multihop"


def test_loss_is_candidate_cross_entropy_and_accuracy():
  task = wikihop_testing.tiny_task()
  features = wikihop_testing.two_records()
  outputs = {"logits": tf.constant(
      [[1.0, 2.0, 3.0] + [head.NEG_INF] * (G - 3),
       [0.0, 5.0] + [head.NEG_INF] * (G - 2)])}
  outputs["prediction"] = tf.argmax(outputs["logits"], -1,
                                    output_type=tf.int32)
  loss = task.per_example_loss(features, outputs).numpy()
  expected = -np.log(np.exp(3.0) / np.exp([1.0, 2.0, 3.0]).sum())
  np.testing.assert_allclose(loss, [expected, 0.0], rtol=1e-6)
  metrics = task.build_metrics()
  task.update_metrics(metrics, features, outputs)
  # Only the labelled example counts (the unlabelled one has label -1).
  assert float(metrics[0].result()) == 1.0


def _predictions(task, prediction):
  outputs = {"prediction": tf.constant(prediction, tf.int32)}
  return {k: v.numpy() for k, v in task.prediction_outputs(
      wikihop_testing.two_records(), outputs).items()}


def test_predictions_file_is_official_format(tmp_path):
  task = wikihop_testing.tiny_task()
  predictions = _predictions(task, [1, 0])
  assert predictions["gold_answer"].tolist() == [b"oslo", b""]
  path = task.write_predictions(predictions, str(tmp_path))
  with open(path) as f:
    assert json.load(f) == {"WH_1": "rome", "WH_2": "lima"}


def test_official_scores_against_the_stored_labels(tmp_path):
  task = wikihop_testing.tiny_task()
  # Only WH_1 is labelled (oslo): right at index 2, wrong at 1.
  assert task.official_scores(_predictions(task, [2, 0]), str(tmp_path)) == {
      "accuracy": 1.0, "num_correct": 1, "num_gold": 1, "num_predicted": 1}
  assert task.official_scores(_predictions(task, [1, 0]),
                              str(tmp_path))["accuracy"] == 0.0
  unlabelled = dict(_predictions(task, [1, 0]),
                    gold_answer=np.array([b"", b""]))
  assert task.official_scores(unlabelled, str(tmp_path)) is None


def test_official_scores_against_a_gold_file(tmp_path):
  gold = tmp_path / "dev.json"
  gold.write_text(json.dumps([
      {"id": "WH_1", "answer": " Rome"}, {"id": "WH_2", "answer": "lima"},
      {"id": "WH_3", "answer": "x"}]))
  task = wikihop_testing.tiny_task(gold_file=str(gold))
  # WH_1 and WH_2 right (answers compared normalized), WH_3 not predicted.
  scores = task.official_scores(_predictions(task, [1, 0]), str(tmp_path))
  assert scores["accuracy"] == pytest.approx(2 / 3)
  assert (scores["num_correct"], scores["num_gold"],
          scores["num_predicted"]) == (2, 3, 2)


def test_side_inputs_and_signatures_without_vocab():
  task = wikihop_testing.tiny_task()
  side = task.side_inputs(wikihop_testing.two_records())
  assert side["l2l_att_mask"].shape == [2, wikihop_testing.L, 9]
  assert side["g2l_relative_att_ids"].shape == [2, G, wikihop_testing.L]
  model = task.build_model()
  model(task.dummy_features(), training=False)
  signatures = task.serving_signatures(model)
  # No vocab_file: no raw-text signature, the two tensor ones only.
  assert sorted(signatures) == ["serve_examples", "serving_default"]
  args, kwargs = signatures["serving_default"].structured_input_signature
  inputs = kwargs or args[0]
  assert set(inputs) == set(task.model_features())
  assert "label" not in inputs


def test_raw_signature_needs_vocab():
  with pytest.raises(ValueError, match="vocab_file"):
    _ = wikihop_testing.tiny_task().featurizer
