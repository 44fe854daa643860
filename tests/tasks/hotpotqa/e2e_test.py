"""HotpotQA end to end on small files in the released format.

synthetic released-format JSON + vocab.txt (the demo's generator) ->
preprocess -> train a few steps in process (loss goes down) -> predict
(official submission JSON) -> export -> eval with `tasks/hotpotqa.gin`
(in-graph metrics, then the official metric with the threshold search) ->
every signature served (in this process, from a SavedModel with no op that
calls back into Python).
"""

import json
import os
import re

import pytest

from demos.hotpotqa import synthetic
import e2e_testing
from tasks.hotpotqa import preprocess

LONG, GLOBAL = 96, 40


def tiny_gin(data_dir: str, path: str) -> str:
  train = os.path.splitext(synthetic.TRAIN_FILE)[0]
  dev = os.path.splitext(synthetic.DEV_FILE)[0]
  lines = e2e_testing.tiny_encoder_gin_lines(len(synthetic.vocabulary())) + [
      f"HotpotQATask.long_seq_len = {LONG}",
      f"HotpotQATask.global_seq_len = {GLOBAL}",
      "HotpotQATask.max_answer_length = 6",
      f"HotpotQATask.train_input = '{data_dir}/{train}.tfrecord'",
      f"HotpotQATask.eval_input = '{data_dir}/{dev}.tfrecord'",
      f"HotpotQATask.predict_input = '{data_dir}/{dev}.tfrecord'",
      f"HotpotQATask.vocab_file = '{data_dir}/vocab.txt'",
      f"HotpotQATask.gold_file = '{data_dir}/{synthetic.DEV_FILE}'",
      "HotpotQATask.sp_threshold_grid = (0.2, 0.4, 0.6)",
      "HotpotQATask.seed = 1",
      "optimizer.learning_rate = 3e-3",
      "optimizer.warmup_fraction = 0.0",
  ] + e2e_testing.trainer_gin_lines(40)
  return e2e_testing.write_gin(path, lines)


@pytest.mark.slow
def test_preprocess_train_predict_export_eval_serve(tmp_path, capsys):
  data_dir = str(tmp_path / "data")
  paths = synthetic.write_dataset(data_dir, num_train=48, num_dev=6, seed=3)
  featurizer = preprocess.make_featurizer(paths["vocab"], None, LONG, GLOBAL)
  for split in ("train", "dev"):
    stats = preprocess.preprocess_file(paths[split], data_dir, featurizer)
    assert stats.examples_written == stats.examples_read > 0
  gin_file = tiny_gin(data_dir, str(tmp_path / "tiny.gin"))
  model_dir = str(tmp_path / "model")

  # 1. Train in this process (saves a process start); the loss goes down.
  # 2. Predict: the official submission format, every dev id. 3. Export a
  # versioned SavedModel.
  steps, export_path = e2e_testing.train_predict_export(
      ["tasks/hotpotqa.gin", gin_file], model_dir, str(tmp_path / "export"),
      capsys)
  assert [s for s, _ in steps] == [10, 20, 30, 40]
  assert steps[-1][1] < 0.8 * steps[0][1], steps
  predictions_dir = os.path.join(model_dir, "predictions")
  with open(os.path.join(predictions_dir, "predictions.json")) as f:
    submission = json.load(f)
  with open(paths["dev"]) as f:
    dev = json.load(f)
  assert set(submission) == {"answer", "sp"}
  assert set(submission["answer"]) == set(submission["sp"]) == {
      r["_id"] for r in dev}
  by_id = {r["_id"]: r for r in dev}
  for record_id, facts in submission["sp"].items():
    titles = {t: len(s) for t, s in by_id[record_id]["context"]}
    for title, sent_id in facts:
      assert 0 <= sent_id < titles[title]
  for record_id, answer in submission["answer"].items():
    context = " ".join(t + " " + " ".join(s)
                       for t, s in by_id[record_id]["context"])
    assert answer in ("yes", "no", "") or answer in context
  # Predict writes the submission only; the official metric is eval's.
  assert os.listdir(predictions_dir) == ["predictions.json"]

  # 4. The runner's eval: in-graph metrics, then the official metric with
  # the threshold search, on the eval input (the same dev records). (In this
  # process, as the steps before: a process start imports TensorFlow again.)
  output = e2e_testing.run_in_process(["tasks/hotpotqa.gin", gin_file],
                                      "eval", model_dir, capsys)
  official = re.search(r"^eval official \| (\{.*\})$", output, re.M)
  assert official, output[-2000:]
  with open(os.path.join(model_dir, "eval_predictions",
                         "threshold_search.json")) as f:
    search = json.load(f)
  assert set(search["by_threshold"]) == {"0.2", "0.4", "0.6"}
  assert search["best"]["joint_f1"] == max(
      m["joint_f1"] for m in search["by_threshold"].values())
  assert search["num_gold"] == search["num_predicted"] == len(dev)
  with open(os.path.join(model_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert "sentence_sp_f1" in results and "answer_type_accuracy" in results
  assert results["official"] == json.loads(official.group(1))
  assert results["official"]["best"]["joint_f1"] == pytest.approx(
      search["best"]["joint_f1"])
  # The eval set's submission at sp_threshold is predict's.
  with open(os.path.join(model_dir, "eval_predictions",
                         "predictions.json")) as f:
    assert json.load(f) == submission

  # 5. Every signature served (no op calls back into Python).
  record = dev[0]
  script = f"""
import json
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops serve_raw uses
loaded = tf.saved_model.load({export_path!r})
record = json.loads({json.dumps(json.dumps(record))})
out = {{"signatures": sorted(loaded.signatures)}}
raw = loaded.signatures["serve_raw"](
    question=tf.constant(record["question"]),
    titles=tf.constant([t for t, _ in record["context"]]),
    sentences=tf.constant([s for _, ss in record["context"] for s in ss]),
    num_sentences=tf.constant([len(ss) for _, ss in record["context"]],
                              tf.int32))
out["raw"] = {{k: v.numpy().tolist() for k, v in raw.items()
              if k != "answer"}}
out["raw"]["answer"] = raw["answer"].numpy().decode()
out["examples_sp_shape"], out["default_keys"] = stored_and_default(
    loaded, {os.path.join(data_dir, "hotpot_dev_distractor_v1.tfrecord")!r},
    2, "sp_probs")
print("RESULT " + json.dumps(out))
"""
  served = e2e_testing.serve_here(script, export_path)
  assert served["signatures"] == ["serve_examples", "serve_raw",
                                  "serve_raw_batch", "serving_default"]
  raw = served["raw"]
  num_sentences = sum(len(s) for _, s in record["context"])
  assert len(raw["sentence_sp_probabilities"]) == num_sentences
  assert len(raw["title_sp_probabilities"]) == len(record["context"])
  assert all(0.0 <= p <= 1.0 for p in raw["sentence_sp_probabilities"])
  assert sum(raw["answer_type_probabilities"]) == pytest.approx(1.0,
                                                                abs=1e-4)
  # The raw path decodes as the batch predictions did (threshold 0.5).
  assert raw["answer"] == submission["answer"][record["_id"]]
  if raw["answer_type"] == 0 and raw["answer_paragraph"] >= 0:
    title, sentences = record["context"][raw["answer_paragraph"]]
    text = title if raw["answer_sentence"] < 0 else sentences[
        raw["answer_sentence"]]
    assert text.encode()[raw["answer_start_byte"]:raw[
        "answer_end_byte"]].decode().strip() == raw["answer"]
  assert served["examples_sp_shape"] == [2, GLOBAL]
  assert "sp_probs" in served["default_keys"]
