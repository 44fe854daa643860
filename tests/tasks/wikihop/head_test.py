"""Tests for tasks.wikihop.head: the candidate head."""

import numpy as np
import tensorflow as tf
import tf_keras

from tasks.wikihop import head
import wikihop_testing


def test_head_masks_non_candidates_in_float32():
  task = wikihop_testing.tiny_task()
  features = wikihop_testing.two_records()
  tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model = task.build_model()
    outputs = model(features, training=False)
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")
  assert isinstance(model, head.WikiHopModel)
  assert outputs["logits"].dtype == tf.float32
  mask = features["candidate_mask"].numpy().astype(bool)
  logits = outputs["logits"].numpy()
  assert np.all(logits[~mask] == head.NEG_INF)
  probs = outputs["probabilities"].numpy()
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
  assert np.all(probs[~mask] == 0.0)
  assert all(mask[b, p] for b, p in enumerate(outputs["prediction"].numpy()))
