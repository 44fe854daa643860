"""HotpotQA task: heads, loss masking, BIO variant, metrics, serve_raw."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.config import EtcConfig
from tasks.hotpotqa import data
from tasks.hotpotqa import decode
from tasks.hotpotqa import features as F
from tasks.hotpotqa import task as T
from tests.test_hotpotqa_features import WORDS
from tests.test_hotpotqa_features import _record
from tests.test_common_tokenization import write_test_vocab

L, G = 48, 16


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return write_test_vocab(tmp_path_factory.mktemp("v") / "vocab.txt", WORDS)


def _task(vocab, **kwargs):
  cfg = EtcConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1,
                  num_attention_heads=2, intermediate_size=32, local_radius=4,
                  relative_pos_max_distance=2, relative_vocab_size=8,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                  residual_attention=True, use_hard_g2l_mask=True)
  return T.HotpotQATask(model_config=cfg, vocab_file=vocab, long_seq_len=L,
                        global_seq_len=G, **kwargs)


def _batch(task, records, is_training=False):
  rows = [task.featurizer.featurize_record(r, is_training)[0]
          for r in records]
  return {k: tf.constant(np.stack([r[k] for r in rows])) for k in rows[0]}


def test_loss_terms_mask_unlabelled_and_unlocated(vocab):
  task = _task(vocab)
  model = task.build_model()
  batch = _batch(task, [
      _record(),  # span, located
      _record(id="q2", answer="no"),  # yes/no: span label at CLS
      _record(id="q3", answer="Rome"),  # dev: span not located
      _record(id="q4", answer=None, supporting_facts=None),  # unlabelled
  ])
  outputs = model(batch, training=False)
  terms = {k: v.numpy() for k, v in task.loss_terms(batch, outputs).items()}
  assert (terms["sp_loss"][:3] > 0).all() and terms["sp_loss"][3] == 0
  assert (terms["answer_type_loss"][:3] > 0).all()
  assert terms["answer_type_loss"][3] == 0
  np.testing.assert_array_equal(terms["span_loss"] > 0,
                                [True, True, False, False])
  loss = task.per_example_loss(batch, outputs).numpy()
  np.testing.assert_allclose(
      loss, (terms["sp_loss"] + terms["answer_type_loss"] +
             terms["span_loss"]) / 3, rtol=1e-6)
  # The span logits never pick padding.
  assert (outputs["start_logits"].numpy()[:, -3:] == T.NEG_INF).all()
  metrics = task.build_metrics()
  task.update_metrics(metrics, batch, outputs)
  results = {m.name: float(m.result()) for m in metrics}
  assert 0.0 <= results["sentence_sp_f1"] <= 1.0
  assert 0.0 <= results["answer_type_accuracy"] <= 1.0


def test_bio_variant(vocab):
  task = _task(vocab, answer_encoding="bio")
  model = task.build_model()
  batch = _batch(task, [_record(), _record(id="q2", answer="yes")])
  outputs = model(batch, training=False)
  assert outputs["bio_logits"].shape == [2, L, 3]
  terms = task.loss_terms(batch, outputs)
  assert (terms["span_loss"].numpy() > 0).all()
  assert outputs["span_score"].shape == [2, G]
  with pytest.raises(ValueError, match="answer_encoding"):
    _task(vocab, answer_encoding="iob")


def test_training_step_reduces_loss(vocab):
  task = _task(vocab)
  model = task.build_model()
  batch = _batch(task, [_record(), _record(id="q2", answer="yes")], True)
  import tf_keras  # pylint: disable=g-import-not-at-top
  optimizer = tf_keras.optimizers.Adam(1e-2)
  losses = []
  for _ in range(15):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(task.per_example_loss(batch, model(batch)))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    losses.append(float(loss))
  assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.slow  # traces the three serving signatures (~30 s)
def test_serve_raw_agrees_with_python_decoding(vocab):
  task = _task(vocab, sp_threshold=0.0)  # every text admissible
  model = task.build_model()
  record = _record(sentences=(("John Doe was born in Paris.", "Bob is x."),
                              ("Paris is the city of light.",)))
  batch = _batch(task, [record])
  outputs = model(batch, training=False)
  predictions = {k: v.numpy() for k, v in
                 task.prediction_outputs(batch, outputs).items()}
  example = decode.unbatch(predictions)[0]
  # Force a span answer so that text recovery is exercised.
  example["answer_type_probs"] = np.array([1.0, 0.0, 0.0])
  answer, sp = decode.decode_example(example, record, 0.0)
  assert sp == [["John Doe", 0], ["John Doe", 1], ["Paris", 0]]

  signatures = task.serving_signatures(model)
  assert set(signatures) == {"serving_default", "serve_examples",
                             "serve_raw"}
  flat = [s for p in record.sentences for s in p]
  raw = signatures["serve_raw"](
      question=tf.constant(record.question),
      titles=tf.constant(list(record.titles)), sentences=tf.constant(flat),
      num_sentences=tf.constant([2, 1]))
  raw = {k: v.numpy() for k, v in raw.items()}
  g = int(outputs["answer_global"][0])
  kinds = predictions["global_kinds"][0]
  np.testing.assert_allclose(
      raw["sentence_sp_probabilities"],
      predictions["sp_probs"][0][kinds == F.KIND_SENTENCE], rtol=1e-5)
  np.testing.assert_allclose(
      raw["title_sp_probabilities"],
      predictions["sp_probs"][0][kinds == F.KIND_TITLE], rtol=1e-5)
  assert int(raw["answer_type"]) == int(outputs["answer_type"][0])
  para = int(predictions["global_paragraph_ids"][0][g])
  sent = int(predictions["global_sentence_ids"][0][g])
  text = F.text_of(record, para, sent)
  if int(raw["answer_type"]) == data.SPAN:
    assert raw["answer"].decode() == answer
    assert (int(raw["answer_paragraph"]), int(raw["answer_sentence"])) == (
        para, sent)
    assert text.encode()[raw["answer_start_byte"]:raw[
        "answer_end_byte"]].decode().strip() == answer
  else:
    assert raw["answer"].decode() in ("yes", "no")
    assert int(raw["answer_start_byte"]) == -1
  # What was cut to fit comes back as -1 (same weights: no absolute
  # positions, so the model runs at other lengths too).
  short = F.HotpotFeaturizer(vocab, long_seq_len=16, global_seq_len=10)
  feats = short.featurize_tf(*F.record_inputs(record)[:4])
  out = model({k: feats[k][tf.newaxis] for k in F.MODEL_FEATURES})
  raw = T.raw_outputs(feats, {k: v[0] for k, v in out.items()},
                      tf.constant(list(record.titles)), tf.constant(flat),
                      tf.constant([2, 1]))
  # Budget: sentence 0.1 does not fit the long input, sentence 1.0 not the
  # global one; paragraph 1's paragraph and title tokens do.
  sentence_probs = raw["sentence_sp_probabilities"].numpy()
  assert sentence_probs[0] >= 0 and (sentence_probs[1:] == -1).all()
  assert (raw["paragraph_sp_probabilities"].numpy() >= 0).all()
