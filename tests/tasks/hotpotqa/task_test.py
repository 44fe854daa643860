"""Tests for tasks.hotpotqa.task: loss masking, the BIO variant, metrics,
training, official scores and serve_raw."""

import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from etc_realformer.training import task as task_lib
import hotpotqa_testing
from hotpotqa_testing import WORDS
from hotpotqa_testing import record as _record
from tasks.common import output_files
from tasks.hotpotqa import data
from tasks.hotpotqa import decode
from tasks.hotpotqa import features as F
from tasks.hotpotqa import task as T
from tokenization_testing import write_test_vocab

L, G = hotpotqa_testing.L, hotpotqa_testing.G
_task = hotpotqa_testing.tiny_task
_batch = hotpotqa_testing.batch


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return write_test_vocab(tmp_path_factory.mktemp("v") / "vocab.txt", WORDS)


def test_registered_under_its_name():
  assert task_lib.get_task_class("hotpotqa") is T.HotpotQATask


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
  terms = task.loss_terms(batch, outputs)
  assert (terms["span_loss"].numpy() > 0).all()
  with pytest.raises(ValueError, match="answer_encoding"):
    _task(vocab, answer_encoding="iob")


def test_training_step_reduces_loss(vocab):
  task = _task(vocab)
  model = task.build_model()
  batch = _batch(task, [_record(), _record(id="q2", answer="yes")], True)
  optimizer = tf_keras.optimizers.Adam(1e-2)
  losses = []
  for _ in range(15):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(task.per_example_loss(batch, model(batch)))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    losses.append(float(loss))
  assert losses[-1] < 0.5 * losses[0], losses


def _predicted(task_kwargs, tmp_path):
  """`official_scores` of `hotpotqa_testing.PREDICTION` (one example) and
  the files it wrote."""
  task = _task(None, sp_threshold_grid=(0.3, 0.5, 0.9), **task_kwargs)
  example = dict(hotpotqa_testing.PREDICTION, record_json=json.dumps(
      hotpotqa_testing.PREDICTED_RECORD.to_json()).encode())
  predictions = {k: np.asarray([v]) for k, v in example.items()}
  task.write_predictions(predictions, str(tmp_path))
  scores = task.official_scores(predictions, str(tmp_path))
  written = {}
  for name in (T.PREDICTIONS_FILE, T.THRESHOLD_SEARCH_FILE,
               T.BEST_PREDICTIONS_FILE):
    if (tmp_path / name).exists():
      written[name] = json.loads((tmp_path / name).read_text())
  return scores, written


def test_official_scores_search_the_threshold_on_the_stored_gold(tmp_path):
  scores, written = _predicted({}, tmp_path)
  # At 0.5 (see tests/tasks/hotpotqa/decode_test.py): answer "Paris, France"
  # (precision 1/2, recall 1) and sp precision 1, recall 1/2: joint F1 1/2;
  # at 0.3 the answer is "Filler" (joint 0), at 0.9 nothing.
  assert scores["best_threshold"] == 0.5 and scores["sp_threshold"] == 0.5
  assert scores["best"]["joint_f1"] == pytest.approx(0.5)
  assert scores["at_sp_threshold"] == scores["best"]
  assert written[T.PREDICTIONS_FILE] == {
      "answer": {"q1": "Paris, France"}, "sp": {"q1": [["Café Noir", 0]]}}
  search = written[T.THRESHOLD_SEARCH_FILE]
  assert (search["num_gold"], search["num_predicted"]) == (1, 1)
  assert search["by_threshold"]["0.3"]["joint_f1"] == 0.0
  assert search["best"] == scores["best"]
  assert written[T.BEST_PREDICTIONS_FILE] == written[T.PREDICTIONS_FILE]


def test_official_scores_over_every_record_of_a_gold_file(tmp_path):
  gold = [hotpotqa_testing.PREDICTED_RECORD.to_json(),
          dict(hotpotqa_testing.PREDICTED_RECORD.to_json(), _id="q2")]
  gold_file = tmp_path / "gold.json"
  gold_file.write_text(json.dumps(gold))
  scores, written = _predicted({"gold_file": str(gold_file)}, tmp_path)
  # q2 is not predicted: it counts 0, so every mean halves.
  assert scores["best"]["joint_f1"] == pytest.approx(0.25)
  assert written[T.THRESHOLD_SEARCH_FILE]["num_gold"] == 2


def test_no_gold_no_official_scores(tmp_path):
  unlabelled = hotpotqa_testing.PREDICTED_RECORD.to_json()
  del unlabelled["answer"], unlabelled["supporting_facts"]
  task = _task(None)
  example = dict(hotpotqa_testing.PREDICTION,
                 record_json=json.dumps(unlabelled).encode())
  predictions = {k: np.asarray([v]) for k, v in example.items()}
  assert task.official_scores(predictions, str(tmp_path)) is None
  assert not (tmp_path / T.THRESHOLD_SEARCH_FILE).exists()


@pytest.mark.slow  # traces the four serving signatures (~30 s)
def test_serve_raw_agrees_with_python_decoding(vocab):
  task = _task(vocab, sp_threshold=0.0)  # every text admissible
  model = task.build_model()
  record = _record(sentences=(("John Doe was born in Paris.", "Bob is x."),
                              ("Paris is the city of light.",)))
  batch = _batch(task, [record])
  outputs = model(batch, training=False)
  predictions = {k: v.numpy() for k, v in
                 task.prediction_outputs(batch, outputs).items()}
  example = output_files.unbatch(predictions)[0]
  # Force a span answer so that text recovery is exercised.
  example["answer_type_probs"] = np.array([1.0, 0.0, 0.0])
  answer, sp = decode.decode_example(example, record, 0.0)
  assert sp == [["John Doe", 0], ["John Doe", 1], ["Paris", 0]]

  signatures = task.serving_signatures(model)
  assert set(signatures) == {"serving_default", "serve_examples",
                             "serve_raw", "serve_raw_batch"}
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
  feats = short.featurize(*F.record_inputs(record)[:4])
  out = model({k: feats[k][tf.newaxis] for k in F.MODEL_FEATURES})
  raw = decode.raw_outputs(feats, {k: v[0] for k, v in out.items()},
                      tf.constant(list(record.titles)), tf.constant(flat),
                      tf.constant([2, 1]))
  # Budget: sentence 0.1 does not fit the long input, sentence 1.0 not the
  # global one; paragraph 1's paragraph and title tokens do.
  sentence_probs = raw["sentence_sp_probabilities"].numpy()
  assert sentence_probs[0] >= 0 and (sentence_probs[1:] == -1).all()
  assert (raw["paragraph_sp_probabilities"].numpy() >= 0).all()
