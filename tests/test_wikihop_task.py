"""WikiHop head, loss, metric, predictions writer and signatures (no I/O)."""

import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from etc_realformer import EtcConfig
from tasks.wikihop import task as wikihop_task

L, G = 32, 8


def _task(**kwargs):
  config = EtcConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32,
                     local_radius=4, relative_pos_max_distance=2,
                     relative_vocab_size=8, residual_attention=True)
  return wikihop_task.WikiHopTask(model_config=config, long_seq_len=L,
                                  global_seq_len=G, **kwargs)


def _features(batch=2):
  """Two records: 3 and 2 candidates, a query token, one 1-sentence doc."""
  f = {k: np.zeros([batch, L], np.int32) for k in (
      "token_ids", "segment_ids", "long_paragraph_breakpoints")}
  f.update({k: np.full([batch, L], -1, np.int32) for k in (
      "long_paragraph_ids", "long_sentence_ids", "l2g_linked_ids")})
  f.update({k: np.zeros([batch, G], np.int32) for k in (
      "global_token_ids", "global_segment_ids",
      "global_paragraph_breakpoints", "ignore_hard_g2l_mask",
      "candidate_mask")})
  for b, num_c in enumerate((3, 2)):
    # Long: one wordpiece per candidate, one query wordpiece, a 4-token doc.
    n = num_c + 1 + 4
    f["token_ids"][b, :n] = np.arange(20, 20 + n)
    f["long_paragraph_breakpoints"][b, :num_c + 1] = 1
    f["long_paragraph_breakpoints"][b, n - 1] = 1
    f["long_sentence_ids"][b, :num_c + 1] = np.arange(num_c + 1)
    f["long_sentence_ids"][b, num_c + 1:n] = num_c + 2
    f["long_paragraph_ids"][b, num_c + 1:n] = num_c + 1
    # Global: candidates, query token, paragraph token, sentence token.
    f["global_token_ids"][b, :num_c + 3] = [4] * num_c + [3, 5, 1]
    f["global_paragraph_breakpoints"][b, :num_c + 1] = 1
    f["global_paragraph_breakpoints"][b, num_c + 2] = 1
    f["candidate_mask"][b, :num_c] = 1
    f["ignore_hard_g2l_mask"][b, :num_c + 1] = 1
  f = {k: tf.constant(v) for k, v in f.items()}
  f["label"] = tf.constant([2, -1], tf.int32)
  f["example_id"] = tf.constant([b"WH_1", b"WH_2"])
  f["candidates"] = tf.constant([[b"paris", b"rome", b"oslo"],
                                 [b"lima", b"quito", b""]])
  return f


def test_head_masks_non_candidates_in_float32():
  task = _task()
  features = _features()
  tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model = task.build_model()
    outputs = model(features, training=False)
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")
  assert outputs["logits"].dtype == tf.float32
  mask = features["candidate_mask"].numpy().astype(bool)
  logits = outputs["logits"].numpy()
  assert np.all(logits[~mask] == wikihop_task.NEG_INF)
  probs = outputs["probabilities"].numpy()
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
  assert np.all(probs[~mask] == 0.0)
  assert all(mask[b, p] for b, p in enumerate(outputs["prediction"].numpy()))


def test_loss_is_candidate_cross_entropy_and_accuracy():
  task = _task()
  features = _features()
  outputs = {"logits": tf.constant(
      [[1.0, 2.0, 3.0] + [wikihop_task.NEG_INF] * (G - 3),
       [0.0, 5.0] + [wikihop_task.NEG_INF] * (G - 2)])}
  outputs["prediction"] = tf.argmax(outputs["logits"], -1,
                                    output_type=tf.int32)
  loss = task.per_example_loss(features, outputs).numpy()
  expected = -np.log(np.exp(3.0) / np.exp([1.0, 2.0, 3.0]).sum())
  np.testing.assert_allclose(loss, [expected, 0.0], rtol=1e-6)
  metrics = task.build_metrics()
  task.update_metrics(metrics, features, outputs)
  # Only the labelled example counts (the unlabelled one has label -1).
  assert float(metrics[0].result()) == 1.0


def test_predictions_file_is_official_format(tmp_path):
  task = _task()
  features = _features()
  outputs = {"prediction": tf.constant([1, 0], tf.int32)}
  predictions = {k: v.numpy() for k, v in
                 task.prediction_outputs(features, outputs).items()}
  path = task.write_predictions(predictions, str(tmp_path))
  with open(path) as f:
    assert json.load(f) == {"WH_1": "rome", "WH_2": "lima"}


def test_side_inputs_and_signatures_without_vocab():
  task = _task()
  side = task.side_inputs(_features())
  assert side["l2l_att_mask"].shape == [2, L, 9]
  assert side["g2l_relative_att_ids"].shape == [2, G, L]
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
    _ = _task().featurizer
