"""Tests for the OpenKP model pieces: visual features, the n-gram head and
its masking, the label distribution and loss, decoding."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer import EtcConfig
from tasks.openkp import decode
from tasks.openkp import task as T

TINY = EtcConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1,
                 num_attention_heads=2, intermediate_size=32, local_radius=4,
                 relative_pos_max_distance=2, relative_vocab_size=8,
                 residual_attention=True)
L, G = 24, 4


def test_font_buckets_and_coordinate_scaling_by_hand():
  sizes = [-3, 0, 0.4, 1, 8, 8.5, 9, 24, 25, 29, 30, 49, 50, 200]
  # Cutoffs 0, 8..24, 29, 34, 39, 44, 49: id = first cutoff >= round(size);
  # 8.5 rounds half to even (8), as Python's round.
  assert T.font_ids(tf.constant(sizes, tf.float32)).numpy().tolist() == [
      0, 0, 0, 1, 1, 1, 2, 17, 18, 18, 19, 22, 23, 23]
  assert T.FONT_ID_VOCAB_SIZE == 24
  scaled = T.scale_to_unit(tf.constant([-100.0, -50.0, 725.0, 1500.0, 9e9]),
                           -50.0, 1500.0)
  np.testing.assert_allclose(scaled.numpy(), [-1, -1, 0, 1, 1])


def test_dense_visual_inputs():
  layer = T.VdomEmbedding(8)
  element = [100.0, 1500.0, 6000.0, -5.0, 1, 1, 0, 1, 16, 0]
  parent = [-50.0, 0.0, -50.0, 18000.0, 1, 0, 1, 0, 30, 1]
  dense = layer.dense_inputs(tf.constant([element + parent])).numpy()[0]
  expected = [(100 - 725) / 775, 1, 1, -1,  # x, y, width, height
              -1, -1, -1, 1,                # parent
              1, 1, 1, 0, 1]                # inline, leaf, p-heading/leaf/bold
  np.testing.assert_allclose(dense, expected, rtol=1e-6)
  assert layer(tf.zeros([2, 3, 20])).shape == [2, 3, 8]


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
      "word_mask": mask, "global_token_ids": np.array([[1, 1, 0, 0]] * 2),
      "global_input_mask": np.array([[1, 1, 0, 0]] * 2),
      "global_vdom_features": vdom, "label_start": starts,
      "label_length": lengths, "num_words": np.array([num_words] * 2),
      "words": np.array([[f"W{i}" for i in range(num_words)]] * 2),
      "keyphrases": np.array([["w1 w2"], [""]]),
  }


def _task(**kwargs):
  tf.keras.utils.set_random_seed(0)
  return T.OpenKPTask(model_config=TINY, long_seq_len=L, global_seq_len=G,
                      **kwargs)


def test_head_masks_cells_past_the_last_word_and_loss_is_finite():
  task = _task()
  model = task.build_model()
  feats = {k: tf.constant(v) for k, v in _features().items()}
  logits = model(feats, training=False)["logits"].numpy()
  assert logits.shape == (2, 5, L) and logits.dtype == np.float32
  for n in range(1, 6):
    valid = logits[0, n - 1] > T.NEG_INF / 2
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
  seen = {}
  original_call = model.encoder.call

  def spy(inputs, **kwargs):
    seen.update({k: k in inputs for k in ("global_embedding_adder",
                                          "long_embedding_adder")})
    return original_call(inputs, **kwargs)

  model.encoder.call = spy
  base = model(feats, training=False)["logits"]
  assert seen == {"global_embedding_adder": use_global,
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


def test_decoding_matches_python_and_takes_distinct_lowercased_phrases():
  rng = np.random.default_rng(0)
  words = ["The", "cat", "", "the", "CAT", "sat", "the", "cat", "Zoë"]
  logits = rng.normal(size=[2, 5, 12]).astype(np.float32)
  # Make "the cat" (words 0-1 and 3-4 and 6-7) the top three cells.
  logits[0, 1, [0, 3, 6]] = [10, 9, 8]
  logits[0, 0, 8] = 7.5  # "zoë"
  num_words = np.array([9, 4])
  padded = np.array([words, words[:4] + [""] * 5])
  phrases, scores, starts, lengths = decode.top_phrases(
      tf.constant(logits), tf.constant(padded), tf.constant(num_words),
      num_candidates=30)
  for b in range(2):
    expected = decode.top_phrases_py(logits[b], list(padded[b][:num_words[b]]),
                                     num_candidates=30)
    got = [p.decode() for p in phrases.numpy()[b] if p]
    assert got == [e[0] for e in expected]
    assert starts.numpy()[b][:len(got)].tolist() == [e[1] for e in expected]
    assert lengths.numpy()[b][:len(got)].tolist() == [e[2] for e in expected]
  first = [p.decode() for p in phrases.numpy()[0]]
  assert first[:2] == ["the cat", "zoë"] and len(set(first)) == 5
  assert all("  " not in p and not p.startswith(" ") for p in first)
  # Scores: softmax probabilities of the chosen cells, best first.
  flat = tf.nn.softmax(logits.reshape(2, -1)).numpy()
  assert scores.numpy()[0, 0] == pytest.approx(flat[0, 1 * 12 + 0])
  assert (np.diff(scores.numpy()[0]) <= 0).all()
  # Document 1 has 4 words, one of them empty: "the", "cat", "the cat"
  # ("" blocks every longer cell; the second "the" repeats): 3 phrases.
  second = [p.decode() for p in phrases.numpy()[1] if p]
  assert sorted(second) == ["cat", "the", "the cat"]
  assert lengths.numpy()[1][3:].tolist() == [-1, -1]
  assert scores.numpy()[1][3:].tolist() == [0.0, 0.0]


# XLA compiles of the bf16 graph take ~30 s on CPU: each switch on its own.
@pytest.mark.parametrize("policy,xla", [("mixed_bfloat16", False),
                                        ("float32", True)])
def test_gradient_step_under_xla_and_mixed_precision(policy, xla):
  import tf_keras  # pylint: disable=g-import-not-at-top
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


def test_decoding_a_document_without_words():
  logits = np.full([1, 5, 8], T.NEG_INF, np.float32)
  phrases, scores, starts, _ = decode.top_phrases(
      tf.constant(logits), tf.zeros([1, 0], tf.string), tf.constant([0]))
  assert phrases.numpy().tolist() == [[b""] * 5]
  assert scores.numpy().tolist() == [[0.0] * 5]
  assert starts.numpy().tolist() == [[-1] * 5]


def test_gin_file_gives_the_original_settings():
  import gin  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import experiment  # pylint: disable=g-import-not-at-top
  from tasks import run  # pylint: disable=g-import-not-at-top
  gin.clear_config()
  try:
    run.parse_gin(["tasks/openkp.gin"], ["etc_config.vocab_size = 100"])
    task = run.task_class()()
    assert isinstance(task, T.OpenKPTask)
    assert (task.long_seq_len, task.global_seq_len) == (4096, 512)
    assert task.use_visual_features_in_global
    assert task.use_visual_features_in_long
    assert task.additive_smoothing_mass == 1e-4
    assert task.model_config.hidden_size == 768
    assert task.model_config.residual_attention
    config = experiment.TrainerConfig()
    assert (config.train_batch_size, config.train_steps) == (64, 4178)
  finally:
    gin.clear_config()
