"""Tests for tasks.pretrain.decode: readable MLM predictions."""

import numpy as np

from tasks.pretrain import decode


def test_samples_show_true_and_predicted_pieces():
  vocab = ["[PAD]", "the", "cat", "sat"]
  predictions = {"masked_lm_positions": np.array([[3, 5, 0], [1, 0, 0]]),
                 "masked_lm_ids": np.array([[1, 2, 0], [3, 0, 0]]),
                 "mlm_predictions": np.array([[1, 3, 0], [7, 0, 0]]),
                 "masked_lm_weights": np.array([[1, 1, 0], [1, 0, 0]])}
  assert decode.samples(predictions, vocab, num_examples=5) == [
      {"positions": [3, 5], "true": ["the", "cat"],
       "predicted": ["the", "sat"]},
      {"positions": [1], "true": ["sat"], "predicted": ["<7>"]}]
  assert decode.pieces(vocab, [0, 9]) == ["[PAD]", "<9>"]
