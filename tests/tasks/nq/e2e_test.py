"""Natural Questions end to end on small files in the released formats.

synthetic nq-train/dev-00.jsonl.gz + vocab.txt (`demos.nq.synthetic`) ->
preprocess (windows) -> train a tiny model a few steps in process (loss goes
down) -> predict (official predictions JSON) -> export ->
`tasks.run.run` with `tasks/nq.gin` in eval mode (in-graph metrics,
then the official scorer against the five-way dev gold, equal to scoring the
predictions file) -> every signature served (in this process, from a
SavedModel with no op that calls back into Python); `serve_raw`
decodes a dev document as the batch predictions did. Run with `pytest -s` to
see the loss curve and the scores.
"""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from demos.nq import synthetic
import e2e_testing
from tasks.common import output_files
from tasks.nq import data
from tasks.nq import decode
from tasks.nq import evaluate
from tasks.nq import preprocess

LONG, GLOBAL, STRIDE, QUESTION = 128, 48, 64, 16
SEED = 5



def tiny_gin(data_dir: str, path: str) -> str:
  lines = e2e_testing.tiny_encoder_gin_lines(len(synthetic.vocabulary())) + [
      f"NaturalQuestionsTask.long_seq_len = {LONG}",
      f"NaturalQuestionsTask.global_seq_len = {GLOBAL}",
      f"NaturalQuestionsTask.stride = {STRIDE}",
      f"NaturalQuestionsTask.max_question_len = {QUESTION}",
      "NaturalQuestionsTask.max_short_answer_length = 8",
      f"NaturalQuestionsTask.train_input = '{data_dir}/nq-train-00.tfrecord'",
      f"NaturalQuestionsTask.eval_input = '{data_dir}/nq-dev-00.tfrecord'",
      f"NaturalQuestionsTask.predict_input = '{data_dir}/nq-dev-00.tfrecord'",
      f"NaturalQuestionsTask.vocab_file = '{data_dir}/vocab.txt'",
      f"NaturalQuestionsTask.gold_file = '{data_dir}/{synthetic.DEV_FILE}'",
      "NaturalQuestionsTask.seed = 1",
      "optimizer.learning_rate = 3e-3",
      "optimizer.warmup_fraction = 0.0",
  ] + e2e_testing.trainer_gin_lines(60)
  return e2e_testing.write_gin(path, lines)


@pytest.mark.slow  # ~100 s on 2 busy cores
def test_preprocess_train_predict_export_score_serve(tmp_path, capsys):
  data_dir = str(tmp_path / "data")
  paths = synthetic.write_dataset(data_dir, num_train=64, num_dev=12,
                                  seed=SEED)
  featurizer = preprocess.make_featurizer(paths["vocab"], None, LONG, GLOBAL,
                                          STRIDE, QUESTION)
  for split in ("train", "dev"):
    stats = preprocess.preprocess_file(paths[split], data_dir, featurizer)
    assert stats.examples_written == stats.examples_read > 0
    assert stats.windows_written > stats.examples_written  # multi-window
  gin_file = tiny_gin(data_dir, str(tmp_path / "tiny.gin"))
  model_dir = str(tmp_path / "model")

  # 1. Train in this process; the loss goes down. 2. Predict: the official
  # predictions JSON. 3. Export a versioned SavedModel.
  steps, export_path = e2e_testing.train_predict_export(
      ["tasks/nq.gin", gin_file], model_dir, str(tmp_path / "export"), capsys)
  assert [s for s, _ in steps] == [10, 20, 30, 40, 50, 60]
  assert steps[-1][1] < 0.7 * steps[0][1], steps
  with capsys.disabled():
    print(f"\nnq e2e loss curve: {steps}")

  predictions_dir = os.path.join(model_dir, "predictions")
  with open(os.path.join(predictions_dir, "predictions.json")) as f:
    submission = json.load(f)
  dev = list(data.read_all(paths["dev"]))
  by_id = {p["example_id"]: p for p in submission["predictions"]}
  assert sorted(by_id) == sorted(r.example_id for r in dev)
  for record in dev:
    p = by_id[record.example_id]
    la = p["long_answer"]
    if la["start_token"] >= 0:  # a real candidate, bytes from the gold file
      c = [c.span for c in record.candidates if c.top_level and
           (c.span.start_token, c.span.end_token) == (la["start_token"],
                                                      la["end_token"])]
      assert c and (c[0].start_byte, c[0].end_byte) == (la["start_byte"],
                                                        la["end_byte"])
      for s in p["short_answers"]:
        assert la["start_token"] <= s["start_token"] < s["end_token"] <= la[
            "end_token"]
  scores = evaluate.score(paths["dev"],
                          os.path.join(predictions_dir, "predictions.json"))
  assert scores["num_gold"] == len(dev) and scores["num_missing"] == 0
  assert 0 < scores["gold_with_long_answer"] < len(dev)

  # 4. The runner's eval with the NQ gin: in-graph metrics, then the
  # official scorer on the eval set's predictions. (In this process, as the
  # steps before: a process start imports TensorFlow again.)
  output = e2e_testing.run_in_process(["tasks/nq.gin", gin_file], "eval",
                                      model_dir, capsys)
  line = re.search(r"^eval official \| (\{.*\})$", output, re.M)
  assert line, output[-2000:]
  official = json.loads(line.group(1))
  with capsys.disabled():
    print(f"nq e2e official: {official}")
  with open(os.path.join(model_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert "answer_type_accuracy" in results and "long_span_accuracy" in results
  assert results["official"] == official
  assert official["num_gold"] == len(dev) and official["num_missing"] == 0
  for k in ("long_f1", "short_f1"):
    assert 0.0 <= official[k] <= 1.0
    assert official[k] == pytest.approx(scores[k], rel=1e-6, abs=1e-9)
  with open(os.path.join(model_dir, "eval_predictions", "nq_eval.json")) as f:
    assert json.load(f)["long_f1"] == official["long_f1"]

  # 5. Every signature served (no op calls back into Python).
  record = next(r for r in dev if by_id[r.example_id]["long_answer"][
      "start_token"] >= 0)
  raw_input = {
      "question": record.question, "doc_tokens": list(record.tokens),
      "doc_token_is_html": list(record.token_is_html),
      "candidate_starts": [c.span.start_token for c in record.candidates],
      "candidate_ends": [c.span.end_token for c in record.candidates],
      "candidate_top_level": [c.top_level for c in record.candidates]}
  text = " ".join(record.tokens)
  script = f"""
import json
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops of the raw signatures
loaded = tf.saved_model.load({export_path!r})
x = json.loads({json.dumps(json.dumps(raw_input))})
out = {{"signatures": sorted(loaded.signatures)}}

def plain(d):
  return {{k: (v.numpy().decode() if v.dtype == tf.string else
              v.numpy().tolist()) for k, v in d.items()}}

out["raw"] = plain(loaded.signatures["serve_raw"](
    question=tf.constant(x["question"]),
    doc_tokens=tf.constant(x["doc_tokens"]),
    doc_token_is_html=tf.constant(x["doc_token_is_html"]),
    candidate_starts=tf.constant(x["candidate_starts"], tf.int32),
    candidate_ends=tf.constant(x["candidate_ends"], tf.int32),
    candidate_top_level=tf.constant(x["candidate_top_level"])))
out["html"] = plain(loaded.signatures["serve_raw"](
    question=tf.constant(x["question"]),
    doc_tokens=tf.constant(x["doc_tokens"]),
    doc_token_is_html=tf.constant(x["doc_token_is_html"]),
    candidate_starts=tf.zeros([0], tf.int32),
    candidate_ends=tf.zeros([0], tf.int32),
    candidate_top_level=tf.zeros([0], tf.bool)))
out["text"] = plain(loaded.signatures["serve_text"](
    question=tf.constant(x["question"]), document_text=tf.constant({text!r})))
out["examples_long_score_shape"], out["default_keys"] = stored_and_default(
    loaded, {os.path.join(data_dir, "nq-dev-00.tfrecord")!r}, 3,
    "long_score")
print("RESULT " + json.dumps(out))
"""
  served = e2e_testing.serve_here(script, export_path)
  assert served["signatures"] == ["serve_examples", "serve_raw",
                                  "serve_raw_batch", "serve_text",
                                  "serve_text_batch", "serving_default"]
  raw = served["raw"]
  expected = by_id[record.example_id]
  # The raw path decodes as the batch predictions did (same windows).
  assert [raw["long_start_token"], raw["long_end_token"]] == [
      expected["long_answer"]["start_token"],
      expected["long_answer"]["end_token"]]
  assert raw["long_score"] == pytest.approx(expected["long_answer_score"],
                                            abs=1e-4)
  assert raw["yes_no_answer"] == expected["yes_no_answer"]
  shorts = [[s["start_token"], s["end_token"]]
            for s in expected["short_answers"]]
  raw_short = [raw["short_start_token"], raw["short_end_token"]]
  assert shorts == ([raw_short] if raw_short[0] >= 0 else [])
  assert raw["num_windows"] >= 2
  assert raw["long_answer_text"] == " ".join(
      t for t, h in zip(record.tokens[raw["long_start_token"]:raw[
          "long_end_token"]], record.token_is_html[raw["long_start_token"]:
                                                  raw["long_end_token"]])
      if not h)
  assert sum(raw["answer_type_probs"]) == pytest.approx(1.0, abs=1e-4)
  # Candidates found from the HTML, and the simplified text: answers too.
  for other in (served["html"], served["text"]):
    assert other["num_windows"] >= 1
    assert other["yes_no_answer"] in ("NONE", "YES", "NO")
    assert -1 <= other["long_start_token"] < max(other["long_end_token"], 0) \
        or other["long_start_token"] == -1
  assert served["text"]["long_start_token"] == served["html"][
      "long_start_token"]
  assert served["examples_long_score_shape"] == [3]
  assert "long_score" in served["default_keys"]


def test_oracle_logits_decode_to_the_labelled_answers(tmp_path):
  """Logits peaked at the featurizer's window labels decode, through
  `window_answers` and the document aggregation, to the first annotation's
  answers (the labels' source), and the official scorer agrees."""
  paths = synthetic.write_dataset(str(tmp_path), num_train=1, num_dev=24,
                                  seed=SEED)
  featurizer = preprocess.make_featurizer(paths["vocab"], None, LONG, GLOBAL,
                                          STRIDE, QUESTION)
  dev = list(data.read_all(paths["dev"]))
  windows = []
  for record in dev:
    feats, _ = featurizer.featurize_record(record)
    heads = []
    for name in ("long_start", "long_end", "short_start", "short_end"):
      logits = np.full(feats["doc_token_map"].shape, -5.0, np.float32)
      logits[np.arange(len(logits)), feats[name]] = 5.0
      heads.append(tf.constant(logits))
    out = decode.window_answers(*heads, feats, max_short_answer_length=8)
    out = {k: v.numpy() for k, v in out.items()}
    out["answer_type_logits"] = np.eye(5, dtype=np.float32)[
        np.maximum(feats["answer_type"], 0)]
    out["example_id"] = feats["example_id"]
    out["window_index"] = feats["window_index"]
    windows.extend(output_files.unbatch(out))
  submission = decode.predictions_json(windows)
  by_id = {p["example_id"]: p for p in submission["predictions"]}
  checked = nested = 0
  for record in dev:
    p = by_id[record.example_id]
    labels = data.labels_of(record)
    a = record.annotations[0]
    top_level = {(c.span.start_token, c.span.end_token)
                 for c in record.candidates if c.top_level}
    if labels.long_span[0] >= 0 and tuple(labels.long_span) not in top_level:
      nested += 1  # a nested candidate: not decodable (no global token)
      continue
    checked += 1
    la = p["long_answer"]
    predicted_long = ((la["start_token"], la["end_token"])
                      if p["long_answer_score"] > 0 else (-1, -1))
    assert predicted_long == tuple(labels.long_span), record.example_id
    if predicted_long[0] >= 0:
      assert (la["start_byte"], la["end_byte"]) == (
          a.long_answer.start_byte, a.long_answer.end_byte)
    assert p["yes_no_answer"] == (a.yes_no_answer if predicted_long[0] >= 0
                                  else "NONE")
    shorts = [(s["start_token"], s["end_token"]) for s in p["short_answers"]
              if p["short_answers_score"] > 0]
    expected = ([tuple(labels.short_span)]
                if labels.answer_type == data.SHORT else [])
    assert shorts == expected, record.example_id
  assert checked >= 15
  # The official scorer on these predictions (nulls below score 0) against
  # the five-way gold: by hand, a predicted long answer is right when >= 2
  # annotators gave a long answer and one of them is this span.
  for p in submission["predictions"]:
    if p["long_answer_score"] <= 0:
      p["long_answer"] = dict(decode.NULL_SPAN)
    if p["short_answers_score"] <= 0:
      p["short_answers"] = []
  predicted = right = gold = 0
  for record in dev:
    la = by_id[record.example_id]["long_answer"]
    spans = [(a.long_answer.start_token, a.long_answer.end_token)
             for a in record.annotations if not a.long_answer.is_null]
    gold += len(spans) >= 2
    if la["start_token"] >= 0:
      predicted += 1
      right += len(spans) >= 2 and (la["start_token"],
                                    la["end_token"]) in spans
  report = evaluate.score_predictions(paths["dev"], submission)
  print(f"\nnq oracle labels ({nested} nested long answers skipped): "
        f"{evaluate.summary_line(report)}")
  assert report["gold_with_long_answer"] == gold
  assert report["ignoring_scores"]["long-answer-precision"] == pytest.approx(
      right / predicted)
  assert report["ignoring_scores"]["long-answer-recall"] == pytest.approx(
      right / gold)
