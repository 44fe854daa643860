"""Tests for tasks.openkp.task: the model's n-gram head and its masking, the
visual feature switches, the label distribution and loss, the in-graph
metric (= the official one), decoding through the task, predictions and
official scores, gin settings."""

import json
import random

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import e2e_testing
from etc_realformer import EtcConfig
from tasks.openkp import evaluate as E
from tasks.openkp import head
from tasks.openkp import task as T

TINY = EtcConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1,
                 num_attention_heads=2, intermediate_size=32, local_radius=4,
                 relative_pos_max_distance=2, relative_vocab_size=8,
                 residual_attention=True)
L, G = 24, 4


def _features(num_words=5, labels=((1, 2),)):
  """A batch of 2 documents with `num_words` one-piece words."""
  tokens = np.zeros([2, L], np.int32)
  tokens[:, :num_words] = np.arange(5, 5 + num_words)
  mask = (tokens > 0).astype(np.int32)
  starts = np.full([2, 3], -1, np.int32)
  lengths = np.full([2, 3], -1, np.int32)
  for i, (s, n) in enumerate(labels):
    starts[0, i], lengths[0, i] = s, n
  vdom = np.zeros([2, G, 20], np.float32)
  vdom[:, :2, 8] = 16.0
  return {
      "token_ids": tokens, "long_input_mask": mask,
      "long_word_ids": np.arange(L)[None].repeat(2, 0) * mask,
      "long_sentence_ids": (np.arange(L)[None].repeat(2, 0) >= 3) * mask,
      "word_mask": mask, "global_token_ids": np.ones([2, G], np.int32),
      "global_input_mask": np.array([[1, 1, 0, 0]] * 2),
      "global_vdom_features": vdom, "label_start": starts,
      "label_length": lengths, "num_words": np.array([num_words] * 2),
      "words": np.array([[f"W{i}" for i in range(num_words)]] * 2),
      "keyphrases": np.array([["w1 w2"], [""]]),
  }


def _task(**kwargs):
  tf_keras.utils.set_random_seed(0)
  return T.OpenKPTask(model_config=TINY, long_seq_len=L, global_seq_len=G,
                      **kwargs)


def test_head_masks_cells_past_the_last_word_and_loss_is_finite():
  task = _task()
  model = task.build_model()
  feats = {k: tf.constant(v) for k, v in _features().items()}
  logits = model(feats, training=False)["logits"].numpy()
  assert logits.shape == (2, 5, L) and logits.dtype == np.float32
  for n in range(1, 6):
    valid = logits[0, n - 1] > head.NEG_INF / 2
    # The n-word phrase at s needs words s..s+n-1 < 5.
    assert valid.tolist() == [s + n <= 5 for s in range(L)], n
  loss = task.per_example_loss(feats, {"logits": tf.constant(logits)})
  assert np.isfinite(loss.numpy()).all()
  assert loss.numpy()[1] == 0.0  # no label: no loss
  assert loss.numpy()[0] == pytest.approx(np.log(15), rel=0.2)  # ~uniform
  # The visual embeddings are task parameters, not encoder parameters.
  names = [v.name for v in model.trainable_variables]
  assert any("vdom_embedding" in n for n in names)
  assert not any("vdom" in v.name for v in model.encoder.trainable_variables)


@pytest.mark.parametrize("use_global,use_long", [(True, True), (True, False),
                                                 (False, True),
                                                 (False, False)])
def test_visual_feature_switches(use_global, use_long):
  task = _task(use_visual_features_in_global=use_global,
               use_visual_features_in_long=use_long)
  model = task.build_model()
  feats = {k: tf.constant(v) for k, v in _features().items()}
  base = model(feats, training=False)["logits"]
  inputs = model.encoder_inputs(feats)
  assert {k: k in inputs for k in ("global_embedding_adder",
                                   "long_embedding_adder")} == {
                                       "global_embedding_adder": use_global,
                                       "long_embedding_adder": use_long}
  changed = dict(feats)
  changed["global_vdom_features"] = feats["global_vdom_features"] + 500.0
  other = model(changed, training=False)["logits"]
  moved = not np.allclose(base.numpy(), other.numpy())
  assert moved == (use_global or use_long)
  assert (model.vdom_embedding is None) == (not (use_global or use_long))


def test_label_distribution_spreads_gold_and_smoothing():
  valid = np.zeros([1, 2, 4], bool)
  valid[0, 0, :3] = True   # 1-word cells at words 0..2
  valid[0, 1, :2] = True   # 2-word cells at words 0..1
  labels = T.ngram_label_distribution(
      tf.constant([[2, 0, -1]]), tf.constant([[1, 2, -1]]),
      tf.constant(valid), additive_smoothing_mass=0.1).numpy()[0]
  eps = 0.1 / 5
  expected = np.zeros(8)
  expected[[0, 1, 2, 4, 5]] = eps
  expected[2] += 0.5   # (n=1, s=2)
  expected[4] += 0.5   # (n=2, s=0) = cell 1 * 4 + 0
  np.testing.assert_allclose(labels, expected / 1.1, rtol=1e-6)
  assert labels.sum() == pytest.approx(1.0)
  empty = T.ngram_label_distribution(
      tf.constant([[-1, -1, -1]]), tf.constant([[-1, -1, -1]]),
      tf.constant(valid), 0.1)
  assert not empty.numpy().any()


# XLA compiles of the bf16 graph take ~30 s on CPU: each switch on its own.
@pytest.mark.parametrize("policy,xla", [("mixed_bfloat16", False),
                                        ("float32", True)])
def test_gradient_step_under_xla_and_mixed_precision(policy, xla):
  tf_keras.mixed_precision.set_global_policy(policy)
  try:
    task = _task()
    model = task.build_model()
    feats = {k: tf.constant(v) for k, v in _features().items()
             if np.asarray(v).dtype.kind not in "OSU"}

    @tf.function(jit_compile=xla)
    def step(f):
      with tf.GradientTape() as tape:
        outputs = model(f, training=True)
        loss = tf.reduce_mean(task.per_example_loss(f, outputs))
      grads = tape.gradient(loss, model.trainable_variables)
      return loss, outputs["logits"], grads

    model(feats, training=False)
    loss, logits, grads = step(feats)
    assert logits.dtype == tf.float32 and np.isfinite(loss.numpy())
    vdom_grads = [g for g, v in zip(grads, model.trainable_variables)
                  if "vdom_embedding" in v.name]
    assert vdom_grads and all(g is not None for g in vdom_grads)
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")


def test_gin_file_gives_the_original_settings():
  task, config = e2e_testing.configured_by_gin("tasks/openkp.gin")
  assert isinstance(task, T.OpenKPTask)
  assert (task.long_seq_len, task.global_seq_len) == (4096, 512)
  assert task.use_visual_features_in_global
  assert task.use_visual_features_in_long
  assert task.additive_smoothing_mass == 1e-4
  assert task.model_config.hidden_size == 768
  assert task.model_config.residual_attention
  assert (config.train_batch_size, config.train_steps) == (64, 4178)


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


def hand_made_predictions():
  """Two documents' `prediction_outputs` (phrases best first, "" = none)."""
  return {
      "url": np.array([b"http://a", b"http://b"], dtype=object),
      "phrases": np.array([[b"kp one", b"x", b"kp two", b"", b""],
                           [b"y", b"z", b"", b"", b""]], dtype=object),
  }


def test_predictions_and_official_scores_of_hand_made_predictions(tmp_path):
  gold = tmp_path / "OpenKPDev.dedup.jsonl"
  gold.write_text("".join(json.dumps(r) + "\n" for r in (
      {"url": "http://a", "text": "t", "KeyPhrases": [["kp", "one"],
                                                      ["kp", "two"]]},
      {"url": "http://b", "text": "t", "KeyPhrases": [["z"]]},
      {"url": "http://c", "text": "t", "KeyPhrases": [["w"]]})))
  task = _task(gold_file=str(gold))
  predictions = hand_made_predictions()
  path = task.write_predictions(predictions, str(tmp_path))
  with open(path) as f:
    lines = [json.loads(line) for line in f]
  assert lines == [
      {"url": "http://a", "KeyPhrases": [["kp one"], ["x"], ["kp two"]]},
      {"url": "http://b", "KeyPhrases": [["y"], ["z"]]}]
  scores = task.official_scores(predictions, str(tmp_path))
  # a: hits at ranks 1 and 3 of 2 gold; b: a hit at rank 2 of 1; c: none.
  assert scores["num_documents"] == 3 and scores["missing_predictions"] == 1
  assert scores["precision@1"] == pytest.approx((1 + 0 + 0) / 3)
  assert scores["recall@3"] == pytest.approx((1 + 1 + 0) / 3)
  assert scores["f1@3"] == pytest.approx((2 / 3 * 2 / (2 / 3 + 1) +
                                          1 / 3 * 2 / (1 / 3 + 1)) / 3)
  with open(tmp_path / T.METRICS_FILE) as f:
    assert json.load(f) == scores
  assert _task().official_scores(predictions, str(tmp_path)) is None


@pytest.mark.parametrize("binding,texts", [
    ("{'x': (10, 10)}", ("OpenKPTask.coord_ranges['x'] = (10, 10)",
                         "high must be above low")),
    ("{'X': (0, 10)}", ("OpenKPTask.coord_ranges['X']", "unknown coordinate")),
    ("{'x': 5}", ("OpenKPTask.coord_ranges['x'] = 5", "(low, high) pair")),
])
def test_bad_coord_ranges_binding_is_one_line_from_the_binary(
    tmp_path, binding, texts):
  import cli_testing  # pylint: disable=g-import-not-at-top
  cli_testing.user_error_line_here(
      "tasks.openkp",
      ["--mode=train", f"--model_dir={tmp_path / 'model'}",
       f"--gin_bindings=OpenKPTask.coord_ranges = {binding}",
       "--gin_bindings=etc_config.vocab_size = 100"], *texts)
  assert not (tmp_path / "model").exists()
