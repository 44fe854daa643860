"""Tests for tasks.pretrain.evaluate: the scores and their baselines."""

import numpy as np
import pytest

from tasks.pretrain import evaluate


def test_scores_and_baselines(tmp_path):
  predictions = {
      "mlm_correct": np.array([[1, 0, 0], [1, 1, 1]], np.float32),
      "masked_lm_ids": np.array([[4, 4, 9], [4, 2, 0]]),
      "masked_lm_weights": np.array([[1, 1, 1], [1, 1, 0]], np.float32),
      "cpc_correct": np.array([[1, 0], [0, 0]], np.float32),
      "cpc_weights": np.array([[1, 1], [1, 0]], np.float32),
      "cpc_length_baseline": np.array([[0.5, 1.0], [0.5, 0]], np.float32),
      "cpc_chance": np.array([1 / 3, 1 / 3], np.float32),
  }
  scores = evaluate.scores(predictions, most_frequent_token_id=4)
  assert scores["mlm_accuracy"] == pytest.approx(3 / 5)
  assert scores["mlm_most_frequent_baseline"] == pytest.approx(3 / 5)
  assert scores["mlm_predictions"] == 5
  assert scores["cpc_accuracy"] == pytest.approx(1 / 3)
  assert scores["cpc_chance"] == pytest.approx(1 / 3)
  assert scores["cpc_length_baseline"] == pytest.approx(2 / 3)
  assert scores["cpc_sentences"] == 3 and scores["examples"] == 2
  assert evaluate.scores(predictions)["mlm_most_frequent_baseline"] is None
  path = str(tmp_path / evaluate.SCORES_FILE)
  evaluate.write_scores(path, scores)
  with open(path) as f:
    assert '"cpc_accuracy"' in f.read()
