"""NQ task: the model's heads (shapes, masking), loss, metrics, training,
predictions, official scores, gin settings (random windows laid out as
`tasks/nq/features.py` says; hand-made predictions for the scores)."""

import gzip
import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import e2e_testing
from etc_realformer.config import EtcConfig
from etc_realformer.errors import UserInputError
from tasks.nq import data
from tasks.nq import decode
from tasks.nq import features as F
from tasks.nq import task as T

L, G, Q, V = 32, 12, 3, 50


def _config(**kwargs):
  return EtcConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1,
                   num_attention_heads=2, intermediate_size=32,
                   local_radius=4, relative_pos_max_distance=2,
                   relative_vocab_size=8, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0, residual_attention=True,
                   **kwargs)


def _task(**kwargs):
  return T.NaturalQuestionsTask(model_config=_config(), long_seq_len=L,
                                global_seq_len=G, **kwargs)


def random_windows(batch=4, seed=0):
  """Windows: [CLS] q q q [SEP] doc... [SEP] pad; candidates of 5 tokens.

  Window b holds document tokens 10 b .. 10 b + n - 1 (n = 20 - b), one
  wordpiece each; candidate c is tokens [5 c, 5 c + 5). Labels: window 0
  long = candidate 1, short = its tokens 6..7; window 1 yes (long =
  candidate 3); window 2 null; window 3 unlabelled.
  """
  rng = np.random.RandomState(seed)
  spec = F.feature_spec(L, G)
  out = {k: np.zeros([batch, *shape], dtype.as_numpy_dtype)
         for k, (dtype, shape) in spec.items()}
  for k in ("doc_token_map", "long_candidate_index", "long_start_byte",
            "long_end_byte", "global_candidate_index",
            "global_candidate_long_start", "global_candidate_long_end",
            "global_candidate_doc_start", "global_candidate_doc_end",
            "global_candidate_start_byte", "global_candidate_end_byte"):
    out[k][:] = -1
  first = Q + 2
  for b in range(batch):
    n = 20 - b
    last = first + n  # the final [SEP]
    out["token_ids"][b, :last + 1] = rng.randint(5, V, size=last + 1)
    out["long_breakpoints"][b, last] = 1
    tokens = np.arange(10 * b, 10 * b + n)
    out["doc_token_map"][b, first:last] = tokens
    out["long_start_byte"][b, first:last] = 4 * tokens
    out["long_end_byte"][b, first:last] = 4 * tokens + 3
    out["long_candidate_index"][b, first:last] = tokens // 5
    # Globals: CLS, Q + 1 question tokens, one per candidate run, trailing.
    sentence = np.zeros([L], np.int32)
    sentence[1:first] = np.arange(1, first)
    cands = sorted(set(tokens // 5))
    g0 = first
    for i, c in enumerate(cands):
      pos = np.flatnonzero(out["long_candidate_index"][b] == c)
      g = g0 + i
      sentence[pos] = g
      out["global_candidate_index"][b, g] = c
      out["global_candidate_long_start"][b, g] = pos[0]
      out["global_candidate_long_end"][b, g] = pos[-1]
      out["global_candidate_doc_start"][b, g] = 5 * c
      out["global_candidate_doc_end"][b, g] = 5 * c + 5
      out["global_candidate_start_byte"][b, g] = 20 * c
      out["global_candidate_end_byte"][b, g] = 20 * c + 19
    trailing = g0 + len(cands)
    sentence[last:] = trailing
    out["sentence_ids"][b] = sentence
    out["global_token_ids"][b, :trailing + 1] = rng.randint(
        1, V, size=trailing + 1)
    out["global_breakpoints"][b, trailing] = 1
    out["example_id"][b] = 100 + b // 2
    out["window_index"][b] = b % 2
    out["num_windows"][b] = 2

  def pos(b, token):
    return first + token - 10 * b

  out["answer_type"][:] = [data.SHORT, data.YES, data.NULL, -1][:batch]
  out["long_start"][0], out["long_end"][0] = pos(0, 5), pos(0, 9)
  out["short_start"][0], out["short_end"][0] = pos(0, 6), pos(0, 7)
  if batch > 1:
    out["long_start"][1], out["long_end"][1] = pos(1, 15), pos(1, 19)
  return {k: tf.constant(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def setup():
  tf_keras.utils.set_random_seed(0)  # the same random head on every run
  task = _task()
  model = task.build_model()
  batch = random_windows()
  outputs = model(batch, training=False)
  return task, model, batch, outputs


def test_heads_shapes_finite_and_masked(setup):
  task, _, batch, outputs = setup
  for name in T.POSITION_HEADS:
    logits = outputs[f"{name}_logits"].numpy()
    assert logits.shape == (4, L)
    in_doc = batch["doc_token_map"].numpy() >= 0
    in_doc[:, 0] = True  # [CLS]: "no answer"
    assert np.isfinite(logits).all()
    assert (logits[~in_doc] == decode.NEG_INF).all()
    assert (logits[in_doc] > decode.NEG_INF / 2).all()
  assert outputs["answer_type_logits"].shape == [4, 5]
  np.testing.assert_allclose(
      outputs["answer_type_probs"].numpy().sum(-1), 1.0, rtol=1e-5)
  for name in decode.WINDOW_OUTPUTS:
    assert outputs[name].shape == [4], name
  # Every window holds whole candidates: a long answer inside the document.
  assert (outputs["long_candidate"].numpy() >= 0).all()
  assert (outputs["short_start"].numpy() >= outputs["long_start"].numpy()
          ).all()
  assert (outputs["short_end"].numpy() <= outputs["long_end"].numpy()).all()
  assert set(task.model_features()) >= set(F.MODEL_FEATURES)
  assert not set(task.model_features()) & set(F.LABEL_FEATURES)


def test_loss_is_the_mean_of_five_cross_entropies(setup):
  task, _, batch, outputs = setup
  terms = {k: v.numpy() for k, v in task.loss_terms(batch, outputs).items()}
  assert sorted(terms) == sorted(
      [f"{n}_loss" for n in T.POSITION_HEADS] + ["answer_type_loss"])
  loss = task.per_example_loss(batch, outputs).numpy()
  assert loss.shape == (4,) and np.isfinite(loss).all()
  np.testing.assert_allclose(loss, sum(terms.values()) / 5, rtol=1e-6)
  assert (loss[:3] > 0).all() and loss[3] == 0.0  # window 3 unlabelled
  # By hand: window 0's long-start term.
  logits = outputs["long_start_logits"].numpy()[0]
  label = int(batch["long_start"][0])
  expected = -(logits[label] - np.log(np.exp(logits - logits.max()).sum())
               - logits.max())
  assert terms["long_start_loss"][0] == pytest.approx(expected, rel=1e-5)


def test_metrics_in_range(setup):
  task, _, batch, outputs = setup
  metrics = task.build_metrics()
  task.update_metrics(metrics, batch, outputs)
  results = {m.name: float(m.result()) for m in metrics}
  for name in ("answer_type_accuracy", "long_start_accuracy",
               "long_span_accuracy", "short_span_accuracy"):
    assert 0.0 <= results[name] <= 1.0
  assert results["answer_type_loss"] > 0


def test_training_steps_reduce_the_loss():
  task = _task()
  model = task.build_model()
  batch = random_windows()
  optimizer = tf_keras.optimizers.Adam(3e-3)

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(task.per_example_loss(
          batch, model(batch, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  losses = [float(step()) for _ in range(30)]
  assert losses[-1] < 0.5 * losses[0], losses
  # Training skips the decoding; inference has it.
  assert "long_score" not in model(batch, training=True)


def test_bad_settings():
  # The task refuses them before any model is built.
  with pytest.raises(ValueError, match="answer_type_source"):
    _task(answer_type_source="cls")
  with pytest.raises(ValueError, match="score_mode"):
    _task(score_mode="max")


def span(start, end):
  """Token span [start, end) with bytes 7 x the tokens (-1: null)."""
  if start < 0:
    return {"start_token": -1, "end_token": -1, "start_byte": -1,
            "end_byte": -1}
  return {"start_token": start, "end_token": end, "start_byte": 7 * start,
          "end_byte": 7 * end}


def write_gold(path, examples):
  """Five-way gold: example_id -> five (long, short or None) pairs."""
  with gzip.open(path, "wt") as f:
    for example_id, annotators in examples.items():
      annotations = [
          {"long_answer": dict(span(*(long or (-1, -1))),
                               candidate_index=0 if long else -1),
           "short_answers": [span(*short)] if short else [],
           "yes_no_answer": "NONE"} for long, short in annotators]
      f.write(json.dumps({"example_id": example_id,
                          "annotations": annotations}) + "\n")
  return str(path)


def test_write_predictions_official_format(setup, tmp_path):
  task, model, batch, _ = setup
  outputs = model(batch, training=False)
  predictions = {k: v.numpy() for k, v in
                 task.prediction_outputs(batch, outputs).items()}
  path = task.write_predictions(predictions, str(tmp_path))
  with open(path) as f:
    submission = json.load(f)
  by_id = {p["example_id"]: p for p in submission["predictions"]}
  assert sorted(by_id) == [100, 101]
  for p in submission["predictions"]:
    assert set(p) == {"example_id", "long_answer", "long_answer_score",
                      "short_answers", "short_answers_score", "yes_no_answer"}
    assert p["yes_no_answer"] in ("NONE", "YES", "NO")
  # The long answer is one of the candidates that example 100's windows
  # hold (window 1 adds candidates 4 and 5 to window 0's 0..3).
  in_100 = batch["example_id"].numpy() == 100
  held = batch["global_candidate_index"].numpy()[in_100]
  starts = {5 * int(c) for c in held[held >= 0]}
  long_answer = by_id[100]["long_answer"]
  assert long_answer["start_token"] in starts
  assert long_answer["end_token"] == long_answer["start_token"] + 5
  # The model's predictions score against gold with a document more.
  gold = write_gold(tmp_path / "nq-dev-00.jsonl.gz", {
      i: [((5, 10), None)] * 2 + [(None, None)] * 3 for i in (100, 101, 102)})
  scores = _task(gold_file=gold).official_scores(predictions, str(tmp_path))
  assert scores["num_gold"] == 3 and scores["num_missing"] == 1
  assert scores["gold_with_long_answer"] == 3
  assert 0.0 <= scores["long_f1"] <= 1.0


def hand_made_predictions():
  """Windows of documents 1 (two windows: the second has the answer) and 2
  (no eligible candidate); document 3 has none."""
  windows = []
  for example_id, index, long_, short, score in (
      (1, 0, (0, 8), None, 0.5), (1, 1, (10, 20), (12, 14), 2.0),
      (2, 0, None, None, 0.0)):
    w = {k: -1 for k in decode.WINDOW_OUTPUTS}
    w.update(long_score=decode.NO_ANSWER_SCORE,
             short_score=decode.NO_ANSWER_SCORE)
    if long_:
      s = span(*long_)
      w.update(long_candidate=index, long_score=score,
               long_start_token=s["start_token"],
               long_end_token=s["end_token"],
               long_start_byte_pred=s["start_byte"],
               long_end_byte_pred=s["end_byte"])
    if short:
      s = span(*short)
      w.update(short_start=5, short_score=1.0,
               short_start_token=s["start_token"],
               short_end_token=s["end_token"],
               short_start_byte_pred=s["start_byte"],
               short_end_byte_pred=s["end_byte"])
    w.update(example_id=example_id, window_index=index,
             answer_type_logits=np.eye(5)[data.SHORT])
    windows.append(w)
  return {k: np.array([w[k] for w in windows]) for k in windows[0]}


def test_official_scores_of_hand_made_predictions(tmp_path):
  gold = write_gold(tmp_path / "nq-dev-00.jsonl.gz", {
      # Long [10, 20) by all five, short [12, 14) by three: both answered.
      1: [((10, 20), (12, 14))] * 3 + [((10, 20), None)] * 2,
      2: [(None, None)] * 5,                        # null
      3: [((30, 40), None)] * 2 + [(None, None)] * 3,   # long, 2 of 5
  })
  task = _task(gold_file=gold)
  predictions = hand_made_predictions()
  scores = task.official_scores(predictions, str(tmp_path))
  # Long: document 1 right, 3 (no window: null) missed -> P 1, R 1/2.
  assert scores["long_precision"] == pytest.approx(1.0)
  assert scores["long_recall"] == pytest.approx(0.5)
  assert scores["long_f1"] == pytest.approx(2 / 3)
  # Short: document 1's is the only gold short answer, and right.
  assert scores["short_f1"] == pytest.approx(1.0)
  assert (scores["num_gold"], scores["num_predicted"],
          scores["num_missing"]) == (3, 2, 1)
  assert "official" not in scores  # the summary; the file has it all
  with open(tmp_path / T.SCORES_FILE) as f:
    report = json.load(f)
  assert report["long_f1"] == scores["long_f1"] and "official" in report
  # The submission holds only the predicted documents.
  with open(task.write_predictions(predictions, str(tmp_path))) as f:
    submitted = json.load(f)["predictions"]
  assert [p["example_id"] for p in submitted] == [1, 2]
  assert submitted[0]["long_answer"] == span(10, 20)
  # Without gold: no scores; a predicted id the gold lacks: an error.
  assert _task().official_scores(predictions, str(tmp_path)) is None
  other = write_gold(tmp_path / "other.jsonl.gz",
                     {1: [(None, None)] * 5})
  with pytest.raises(UserInputError, match="other.jsonl.gz"):
    _task(gold_file=other).official_scores(predictions, str(tmp_path))


def test_gin_file_gives_the_original_settings():
  task, config = e2e_testing.configured_by_gin("tasks/nq.gin")
  assert isinstance(task, T.NaturalQuestionsTask)
  assert (task.long_seq_len, task.global_seq_len) == (4096, 230)
  assert (task.stride, task.max_question_len) == (2048, 32)
  assert task.max_short_answer_length == 32
  assert task.model_config.hidden_size == 768
  assert task.model_config.residual_attention
  assert task.model_config.use_hard_g2l_mask
  assert config.train_batch_size == 64
