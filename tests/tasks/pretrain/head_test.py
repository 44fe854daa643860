"""Tests for tasks.pretrain.head: the MLM head (Model Garden's MaskedLM,
tied to the embeddings, loading BERT's cls/predictions/*), and the CPC
targets and negatives worked out by hand on a masked batch."""

import gin
import numpy as np
import pytest
import tensorflow as tf

from bert_testing import bert_tensors
from etc_realformer import BertConfig
from etc_realformer.checkpoints import initialization
from etc_realformer.checkpoints import lifting
from etc_realformer.checkpoints.official import save_official_checkpoint
from etc_realformer.errors import UserInputError
from etc_realformer.training import experiment
from tasks.pretrain import head
import pretrain_testing


@pytest.fixture(scope="module")
def setup():
  task = pretrain_testing.tiny_task(
      masking_fields=dict(max_predictions_per_seq=6, max_cpc_sentences=2,
                          cpc_max_sentence_len=8),
      cpc_fields=dict(temperature=0.5))
  model = task.build_model()
  stored = pretrain_testing.hand_batch()
  features = task.mask({k: tf.constant(v) for k, v in stored.items()},
                       tf.constant([3, 4], tf.int64))
  features = {k: v for k, v in features.items()
              if k in task.model_input_spec()}
  outputs = model(features, training=False)
  return task, model, stored, features, outputs


def test_mlm_head_is_masked_lm_tied_to_the_embeddings(setup):
  task, model, _, features, outputs = setup
  table = model.encoder.embeddings.token_embedding.embedding_table
  assert model.masked_lm.embedding_table is table
  names = sorted(v.name for v in model.masked_lm.trainable_variables)
  assert any("transform/dense" in n for n in names), names
  assert any("transform/LayerNorm" in n for n in names), names
  assert any("output_bias" in n for n in names), names
  p = task.masking.max_predictions_per_seq
  assert outputs["mlm_logits"].shape == [2, p, 120]
  assert outputs["mlm_logits"].dtype == tf.float32
  # The logits are the transformed long outputs at the masked positions
  # times the embedding table, plus the bias.
  long_output, _ = model.encode(features)
  gathered = tf.reshape(tf.gather(
      long_output, features["masked_lm_positions"], batch_dims=1), [-1, 32])
  mlm = model.masked_lm
  expected = tf.matmul(mlm.layer_norm(mlm.dense(gathered)), table,
                       transpose_b=True) + mlm.bias
  np.testing.assert_allclose(outputs["mlm_logits"],
                             tf.reshape(expected, [2, p, 120]), atol=1e-5)


def test_cpc_targets_and_negatives_by_hand(setup):
  task, model, stored, features, outputs = setup
  weights = features["cpc_weights"].numpy()
  assert weights.tolist() == [[1, 0], [1, 0]]
  _, global_output = model.encode(features)
  predictions, targets = [], []
  for b in range(2):
    g = int(features["cpc_global_positions"][b, 0])
    predictions.append(global_output[b, g].numpy())
    # The target: the sentence alone (its stored, unmasked pieces), one
    # global token that sees only it.
    sentence = stored["token_ids"][b][stored["sentence_ids"][b] == g]
    n = int(np.sum((stored["sentence_ids"][b] == g) &
                   (np.arange(64) <= np.argmax(
                       stored["long_breakpoints"][b]))))
    sentence = sentence[:n]
    alone = {"token_ids": np.zeros([1, 8], np.int32),
             "global_token_ids": np.array([[1]], np.int32),
             "long_breakpoints": np.zeros([1, 8], np.int32),
             "global_breakpoints": np.array([[1]], np.int32),
             "sentence_ids": np.zeros([1, 8], np.int32)}
    alone["token_ids"][0, :n] = sentence
    alone["long_breakpoints"][0, n - 1] = 1
    side = task.side_inputs({k: tf.constant(v) for k, v in alone.items()})
    # Hard g2l: the one global token sees exactly the sentence's pieces.
    assert side["g2l_att_mask"].numpy()[0, 0].tolist() == (
        [1] * n + [0] * (8 - n))
    _, alone_global = model.encode({k: tf.constant(v)
                                    for k, v in alone.items()})
    targets.append(alone_global[0, 0].numpy())

  def project(x):
    x = model.cpc_projection[0](tf.constant(np.stack(x))).numpy()
    return x / np.linalg.norm(x, axis=-1, keepdims=True)

  scores = project(predictions) @ project(targets).T / 0.5
  logits = outputs["cpc_logits"].numpy()
  assert logits.shape == (2, 2, 4)
  # Slots: (0, 0), (0, 1), (1, 0), (1, 1); 0 and 2 hold sentences, each
  # row scores its own target and the other example's (the negative).
  np.testing.assert_allclose(logits[0, 0, [0, 2]], scores[0], atol=1e-4)
  np.testing.assert_allclose(logits[1, 0, [0, 2]], scores[1], atol=1e-4)
  assert (logits[:, :, [1, 3]] == head.NEG_INF).all()
  assert outputs["cpc_labels"].numpy().tolist() == [[0, 1], [2, 3]]
  assert outputs["cpc_predictions"].numpy()[:, 0].tolist() == [
      2 * int(np.argmax(scores[0])), 2 * int(np.argmax(scores[1]))]


def test_cpc_negatives_join_the_candidates_in_training_only():
  task = pretrain_testing.tiny_task(
      masking_fields=dict(max_predictions_per_seq=6, max_cpc_sentences=2,
                          cpc_max_sentence_len=8, cpc_negatives=1),
      cpc_fields=dict(temperature=0.5))
  model = task.build_model()
  stored = {k: tf.constant(v)
            for k, v in pretrain_testing.hand_batch().items()}
  seed = tf.constant([3, 4], tf.int64)
  assert "cpc_negative_token_ids" not in task.mask(stored, seed)
  assert "cpc_negative_token_ids" not in task.model_input_spec()
  features = task.mask(stored, seed, training=True)
  features = {k: v for k, v in features.items()
              if k in task.model_input_spec() or "negative" in k}
  outputs = model(features, training=False)
  logits = outputs["cpc_logits"].numpy()
  # 4 CPC slots, then 2 x 2 x 1 negative slots; queries in slots 0 and 2
  # have one negative each (slots 4 and 6), the empty ones none.
  assert logits.shape == (2, 2, 8)
  assert features["cpc_negative_lengths"].numpy()[:, 1].tolist() == [0, 0]
  assert (logits[:, :, [1, 3, 5, 7]] == head.NEG_INF).all()
  assert outputs["cpc_labels"].numpy().tolist() == [[0, 1], [2, 3]]
  # A negative's column scores the query against that sentence's target
  # from the second pass, as a CPC sentence's column does.
  _, global_output = model.encode(features)
  for b in range(2):
    n = int(features["cpc_negative_lengths"][b, 0])
    sentence = features["cpc_negative_token_ids"].numpy()[b, 0]
    alone = {"token_ids": sentence[np.newaxis].astype(np.int32),
             "global_token_ids": np.array([[1]], np.int32),
             "long_breakpoints": np.eye(8, dtype=np.int32)[[n - 1]],
             "global_breakpoints": np.array([[1]], np.int32),
             "sentence_ids": np.zeros([1, 8], np.int32)}
    _, target = model.encode({k: tf.constant(v) for k, v in alone.items()})
    g = int(features["cpc_global_positions"][b, 0])
    pair = model.project(tf.stack([global_output[b, g], target[0, 0]]))
    np.testing.assert_allclose(
        logits[b, 0, 4 + 2 * b], float(tf.reduce_sum(pair[0] * pair[1]))
        / 0.5, atol=1e-4)
  # The loss and the metrics take the wider candidate set.
  losses = task.cpc_losses(features, outputs).numpy()
  assert np.isfinite(losses).all() and (losses[:, 0] > 0).all()


def _training_batch(**cpc_fields):
  """(model, the hand batch masked for training with one negative per CPC
  sentence) of a tiny task with the CPC head's `cpc_fields`."""
  task = pretrain_testing.tiny_task(
      masking_fields=dict(max_predictions_per_seq=6, max_cpc_sentences=2,
                          cpc_max_sentence_len=8, cpc_negatives=1),
      cpc_fields=cpc_fields)
  stored = {k: tf.constant(v)
            for k, v in pretrain_testing.hand_batch().items()}
  features = task.mask(stored, tf.constant([3, 4], tf.int64), training=True)
  return task.build_model(), {
      k: v for k, v in features.items()
      if k in task.model_input_spec() or "negative" in k}


def test_same_length_candidates_in_training_only():
  model, features = _training_batch(same_length_in_training=True)
  lengths = np.concatenate([features["cpc_lengths"].numpy().reshape(-1),
                            features["cpc_negative_lengths"].numpy()
                            .reshape(-1)])
  query_lengths = features["cpc_lengths"].numpy().reshape(-1)
  trained = model(features, training=True)["cpc_logits"].numpy()
  evaluated = model(features, training=False)["cpc_logits"].numpy()
  trained = trained.reshape(-1, trained.shape[-1])
  evaluated = evaluated.reshape(-1, evaluated.shape[-1])
  other_lengths = 0
  for q in np.flatnonzero(query_lengths > 0):
    same = lengths == query_lengths[q]
    # Its own slot stays, and so does every candidate of its length.
    assert same[q]
    assert (trained[q][same] > head.NEG_INF).all()
    assert (trained[q][~same] == head.NEG_INF).all()
    # Evaluation scores every sentence present, whatever its length.
    assert (evaluated[q][lengths > 0] > head.NEG_INF).all()
    other_lengths += int(((lengths > 0) & ~same).sum())
  # The batch has candidates of another length for training to drop.
  assert other_lengths > 0


def test_centred_cosine_by_hand():
  model, features = _training_batch(temperature=0.5, center=True)
  logits = model(features, training=False)["cpc_logits"].numpy()
  logits = logits.reshape(-1, logits.shape[-1])
  _, global_output = model.encode(features)
  queries = features["cpc_weights"].numpy().reshape(-1) > 0
  predicted = tf.gather(global_output, features["cpc_global_positions"],
                        batch_dims=1).numpy().reshape(-1, 32)
  _, target = model.encode(model.cpc_target_features(features))
  present = model.cpc_target_lengths(features).numpy() > 0
  projection = model.cpc_projection[0]
  p = projection(tf.constant(predicted)).numpy()
  t = projection(target[:, 0]).numpy()
  # Each side minus the mean of its own present rows (queries; queries and
  # negatives), then the cosine.
  p = p - p[queries].mean(0)
  t = t - t[present].mean(0)
  p /= np.linalg.norm(p, axis=-1, keepdims=True)
  t /= np.linalg.norm(t, axis=-1, keepdims=True)
  expected = p @ t.T / 0.5
  assert queries.sum() == 2 and present.sum() == 4
  np.testing.assert_allclose(logits[queries][:, present],
                             expected[queries][:, present], atol=1e-4)
  # Without `present`, every row counts in the mean.
  x = tf.random.stateless_normal([3, 32], [1, 2])
  projected = projection(x).numpy()
  projected -= projected.mean(0)
  np.testing.assert_allclose(
      model.project(x),
      projected / np.linalg.norm(projected, axis=-1, keepdims=True),
      atol=1e-5)
  # Centring changes the scores: without it they are other numbers.
  model.cpc_center = False
  plain = model(features, training=False)["cpc_logits"].numpy()
  plain = plain.reshape(-1, plain.shape[-1])
  assert not np.allclose(plain[queries][:, present],
                         expected[queries][:, present], atol=1e-2)


@pytest.mark.parametrize("weight", [0.5, 0.75])
def test_two_view_projection_scores_a_weighted_sum_of_two_cosines(weight):
  task = pretrain_testing.tiny_task(
      masking_fields=dict(max_predictions_per_seq=6, max_cpc_sentences=1,
                          cpc_max_sentence_len=8),
      cpc_fields=dict(projection="none+mlp", mlp_view_weight=weight))
  model = task.build_model()
  a = tf.random.stateless_normal([3, 32], [5, 6])
  b = tf.random.stateless_normal([4, 32], [7, 8])

  def cosines(x, y):
    x = tf.math.l2_normalize(x, axis=-1)
    y = tf.math.l2_normalize(y, axis=-1)
    return tf.matmul(x, y, transpose_b=True).numpy()

  def mlp(x):
    for layer in model.cpc_projection:
      x = layer(x)
    return x

  assert len(model.cpc_projection) == 2
  scores = tf.matmul(model.project(a), model.project(b),
                     transpose_b=True).numpy()
  np.testing.assert_allclose(
      scores, (1 - weight) * cosines(a, b) + weight * cosines(mlp(a), mlp(b)),
      atol=1e-5)
  with pytest.raises(UserInputError, match="mlp_view_weight"):
    pretrain_testing.tiny_task(
        cpc_fields=dict(mlp_view_weight=-0.1)).build_model()


@pytest.mark.parametrize("scale", [0.0, 0.25])
def test_two_view_gradient_scale_on_the_mlp_view(scale):
  weight = 0.6
  task = pretrain_testing.tiny_task(
      masking_fields=dict(max_predictions_per_seq=6, max_cpc_sentences=1,
                          cpc_max_sentence_len=8),
      cpc_fields=dict(projection="none+mlp", mlp_view_weight=weight,
                      mlp_view_gradient_scale=scale))
  model = task.build_model()
  a = tf.random.stateless_normal([3, 32], [5, 6])
  b = tf.random.stateless_normal([4, 32], [7, 8])
  probe = tf.random.stateless_normal([3, 4], [9, 10])

  def mlp(x):
    for layer in model.cpc_projection:
      x = layer(x)
    return x

  def view(x, y):
    return tf.reduce_sum(probe * tf.matmul(
        tf.math.l2_normalize(x, axis=-1), tf.math.l2_normalize(y, axis=-1),
        transpose_b=True))

  with tf.GradientTape(persistent=True) as tape:
    tape.watch(a)
    score = tf.reduce_sum(probe * tf.matmul(
        model.project(a), model.project(b), transpose_b=True))
    first_view = (1 - weight) * view(a, b)
    second_view = weight * view(mlp(a), mlp(b))
  # The forward pass is the two views' weighted sum whatever the scale.
  np.testing.assert_allclose(score, first_view + second_view, rtol=1e-5)
  # What reaches the encoder's outputs is the first view's gradient and
  # `scale` x the second's; the MLP itself learns from all of it.
  np.testing.assert_allclose(
      tape.gradient(score, a),
      tape.gradient(first_view, a) + scale * tape.gradient(second_view, a),
      atol=1e-6)
  kernels = [layer.kernel for layer in model.cpc_projection]
  for g, full in zip(tape.gradient(score, kernels),
                     tape.gradient(second_view, kernels)):
    np.testing.assert_allclose(g, full, atol=1e-6)
  with pytest.raises(UserInputError, match="CpcHeadConfig.mlp_view_gradient"):
    pretrain_testing.tiny_task(
        cpc_fields=dict(mlp_view_gradient_scale=1.5)).build_model()


def test_predictor_acts_on_the_prediction_side_only():
  task = pretrain_testing.tiny_task(
      masking_fields=dict(max_predictions_per_seq=6, max_cpc_sentences=1,
                          cpc_max_sentence_len=8),
      cpc_fields=dict(predictor=True))
  model = task.build_model()
  x = tf.random.stateless_normal([3, 32], [1, 2])
  # CPC's bilinear score starts as the symmetric one: the predictor is the
  # identity at initialisation.
  np.testing.assert_allclose(model.project(x, prediction=True),
                             model.project(x), atol=1e-6)
  kernel = model.cpc_predictor.kernel
  kernel.assign(kernel * 0 + tf.random.stateless_normal(kernel.shape,
                                                        [3, 4]))
  assert not np.allclose(model.project(x, prediction=True),
                         model.project(x), atol=1e-3)
  # Targets never go through it.
  projected = model.cpc_projection[0](x)
  np.testing.assert_allclose(model.project(x),
                             tf.math.l2_normalize(projected, axis=-1),
                             atol=1e-6)


def test_stop_gradient_and_projection_options():
  task = pretrain_testing.tiny_task(
      masking_fields=dict(max_predictions_per_seq=6, max_cpc_sentences=1,
                          cpc_max_sentence_len=8),
      cpc_fields=dict(projection="mlp"))
  model = task.build_model()
  assert len(model.cpc_projection) == 2
  stored = pretrain_testing.hand_batch()
  features = task.mask({k: tf.constant(v) for k, v in stored.items()},
                       tf.constant([3, 4], tf.int64))
  features = {k: v for k, v in features.items()
              if k in task.model_input_spec()}

  def cpc_gradients():
    with tf.GradientTape() as tape:
      outputs = model(features, training=False)
      loss = tf.reduce_sum(task.cpc_losses(features, outputs))
    variables = model.encoder.trainable_variables
    return [tf.convert_to_tensor(g).numpy()
            for g in tape.gradient(loss, variables) if g is not None]

  both = cpc_gradients()
  model.cpc_stop_gradient = True
  prediction_only = cpc_gradients()
  # Without the target pass's share, the encoder still gets the
  # prediction pass's gradient, a different one.
  assert prediction_only and len(prediction_only) == len(both)
  assert any(not np.allclose(a, b) for a, b in zip(both, prediction_only))
  for bad in (dict(projection="deep"), dict(temperature=0.0)):
    with pytest.raises(UserInputError):
      pretrain_testing.tiny_task(cpc_fields=bad).build_model()


def _write_head(prefix, tensors):
  names = sorted(tensors)
  tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names,
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.constant(tensors[n]) for n in names])
  return prefix


def test_load_mlm_head_from_bert_names(tmp_path, setup):
  _, model, _, _, _ = setup
  rng = np.random.RandomState(0)
  tensors = {
      "cls/predictions/transform/dense/kernel": rng.randn(32, 32),
      "cls/predictions/transform/dense/bias": rng.randn(32),
      "cls/predictions/transform/LayerNorm/gamma": rng.randn(32),
      "cls/predictions/transform/LayerNorm/beta": rng.randn(32),
      "cls/predictions/output_bias": rng.randn(120),
      "etc_document_bert/other": rng.randn(3),
  }
  tensors = {k: v.astype(np.float32) for k, v in tensors.items()}
  assert head.load_mlm_head(model, _write_head(str(tmp_path / "ok.ckpt"),
                                               tensors))
  for name, var in head.mlm_head_variables(model).items():
    np.testing.assert_allclose(var.numpy(), tensors[name])
  # No head at all: nothing to load.
  assert not head.load_mlm_head(model, _write_head(
      str(tmp_path / "none.ckpt"), {"etc_document_bert/x": np.zeros(2)}))
  # Part of it, or the wrong vocabulary: one error listing every problem,
  # nothing assigned.
  before = model.masked_lm.bias.numpy().copy()
  broken = dict(tensors)
  del broken["cls/predictions/transform/dense/bias"]
  broken["cls/predictions/output_bias"] = np.zeros(99, np.float32)
  with pytest.raises(UserInputError, match=r"missing cls/predictions/"
                     r"transform/dense/bias; cls/predictions/output_bias: "
                     r"checkpoint \[99\] vs model \[120\]"):
    head.load_mlm_head(model, _write_head(str(tmp_path / "bad.ckpt"),
                                          broken))
  np.testing.assert_array_equal(model.masked_lm.bias.numpy(), before)


def test_mlm_head_from_a_lifted_init_checkpoint(tmp_path):
  """A lifted BERT checkpoint (as `python -m tools.checkpoints.lift_checkpoint` writes
  it: the encoder in the released format, BERT's head at the root) given as
  TrainerConfig.init_checkpoint: the trainer loads the encoder, the task
  the MLM head."""
  bert = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2,
              num_attention_heads=4, intermediate_size=64,
              max_position_embeddings=16, type_vocab_size=2)
  tensors = bert_tensors(bert)
  lifted, heads, _ = lifting.lift(
      BertConfig(**bert), tensors, lifting.LiftOptions(
          long_seq_len=64, residual_attention=True,
          etc=dict(local_radius=8, relative_pos_max_distance=4,
                   relative_vocab_size=12)))
  prefix = save_official_checkpoint(lifted, str(tmp_path / "model.ckpt"),
                                    extra=heads)
  gin.clear_config()
  try:
    # The task reads the trainer's init_checkpoint from gin.
    gin.bind_parameter(f"{experiment.TrainerConfig.__name__}"
                       ".init_checkpoint", prefix)
    task = pretrain_testing.tiny_task(
        masking_fields=dict(max_predictions_per_seq=6),
        model_config=lifted.config)
    model = task.build_model()
  finally:
    gin.clear_config()
  for name, var in head.mlm_head_variables(model).items():
    np.testing.assert_allclose(var.numpy(), tensors[name])
  assert initialization.initialize_encoder(
      model.encoder, prefix) == initialization.CheckpointKind.OFFICIAL_TF1
  np.testing.assert_allclose(
      model.masked_lm.embedding_table.numpy(),
      tensors["bert/embeddings/word_embeddings"])
