"""OpenKP end to end through the binaries, on small files in the released
format.

OpenKP{Train,Dev,EvalPublic}.jsonl (written here, with invalid VDOMs, missing
keyphrases, a duplicate URL and non-ASCII text) + vocab.txt ->
`tasks.openkp.preprocess` (in this process) -> `python -m tasks.openkp
--mode=train_and_eval` (loss goes down; in-graph P/R/F1) -> eval (the official metric on the eval
set's predictions, which must equal the in-graph metric) -> predict (jsonl)
-> export -> every signature queried (in this process, from a SavedModel
with no op that calls back into Python), `serve_raw` with the
raw text and VDOM string.
"""

import json
import os
import random

import gin
import pytest

import cli_testing
import e2e_testing
import openkp_testing as data_testing
from tasks import run

LONG, GLOBAL = 64, 8


def add_bad_lines(path: str, rng: random.Random) -> None:
  """Appends records the preprocessing must skip, and a duplicate URL."""
  with open(path, encoding="utf-8") as f:
    first = json.loads(f.readline())
  bad_vdom = dict(data_testing.synthetic_record(rng, "http://bad/vdom"),
                  VDOM='[{"text": "x", "start_idx": 0}]')
  no_kp = data_testing.synthetic_record(rng, "http://bad/nokp")
  del no_kp["KeyPhrases"]
  gap = data_testing.synthetic_record(rng, "http://bad/gap")
  vdom = json.loads(gap["VDOM"])
  vdom[1]["start_idx"] += 1
  gap["VDOM"] = json.dumps(vdom)
  duplicate = dict(first, KeyPhrases=first.get("KeyPhrases", []) + [["zz"]])
  with open(path, "a", encoding="utf-8") as f:
    for r in (bad_vdom, no_kp, gap, duplicate):
      f.write(json.dumps(r, ensure_ascii=False) + "\n")


def tiny_gin(data_dir: str, path: str) -> str:
  lines = [
      "include 'models/etc_tiny.gin'",
      "etc_config.vocab_size = 100",
      "etc_config.hidden_size = 32",
      "etc_config.intermediate_size = 64",
      "etc_config.num_hidden_layers = 1",
      f"OpenKPTask.long_seq_len = {LONG}",
      f"OpenKPTask.global_seq_len = {GLOBAL}",
      f"OpenKPTask.train_input = '{data_dir}/OpenKPTrain.tfrecord'",
      f"OpenKPTask.eval_input = '{data_dir}/OpenKPDev.tfrecord'",
      f"OpenKPTask.predict_input = '{data_dir}/OpenKPDev.tfrecord'",
      f"OpenKPTask.gold_file = '{data_dir}/OpenKPDev.dedup.jsonl'",
      f"OpenKPTask.vocab_file = '{data_dir}/vocab.txt'",
      "OpenKPTask.seed = 1",
      "optimizer.learning_rate = 3e-3",
  ] + e2e_testing.trainer_gin_lines(40)
  return e2e_testing.write_gin(path, lines)


@pytest.mark.slow
def test_preprocess_train_predict_score_export_serve(tmp_path):
  data_dir = str(tmp_path / "data")
  paths = data_testing.write_openkp_dir(data_dir, num_train=48, num_dev=8,
                                        num_eval=4)
  rng = random.Random(7)
  add_bad_lines(paths["Train"], rng)
  add_bad_lines(paths["Dev"], rng)

  # 1. Preprocess the three files with the binary (in this process: its own
  # process runs in preprocess_test).
  output = cli_testing.output_here(
      "tasks.openkp.preprocess",
      [f"--input={paths['Train']}", f"--input={paths['Dev']}",
       f"--input={paths['EvalPublic']}", f"--vocab={paths['vocab']}",
       f"--output_dir={data_dir}", f"--long_seq_len={LONG}",
       f"--global_seq_len={GLOBAL}"])
  for split, written in (("Train", 48), ("Dev", 8), ("EvalPublic", 4)):
    with open(os.path.join(data_dir, f"OpenKP{split}.stats.json")) as f:
      stats = json.load(f)
    assert stats["examples_written"] == written, (split, stats)
    if split != "EvalPublic":
      assert stats["skipped"] == {"duplicate_url": 1, "invalid_vdom": 1,
                                  "missing_field": 1,
                                  "vdom_not_contiguous": 1}, stats
      assert {s["id"] for s in stats["skipped_records"]} >= {
          "http://bad/vdom", "http://bad/nokp", "http://bad/gap"}
  assert "skipped 4" in output

  # 2. Train and evaluate with the task alias.
  gin_file = tiny_gin(data_dir, str(tmp_path / "tiny.gin"))
  model_dir = str(tmp_path / "model")
  output = e2e_testing.run_binary(["tasks.openkp", f"--gin_file={gin_file}",
                       "--mode=train_and_eval", f"--model_dir={model_dir}"])
  steps = e2e_testing.progress(output)
  print("openkp e2e loss by step:", steps)  # shown with pytest -s
  assert steps[-1][0] == 40
  assert steps[-1][1] < 0.5 * steps[0][1], steps
  with open(os.path.join(model_dir, "eval_results.json")) as f:
    eval_results = json.load(f)
  assert eval_results["step"] == 40
  for name in ("precision_at_1", "recall_at_3", "f1_at_5"):
    assert 0.0 <= eval_results[name] <= 1.0

  # 3. Eval and predict in this process (the runner's library entry): the
  # official scores of the eval set's predictions equal the in-graph metric.
  run.register_tasks()
  gin.clear_config()
  try:
    run.parse_gin(["tasks/openkp.gin", gin_file], [])
    results = run.run("eval", model_dir)
    run.run("predict", model_dir)
    run.parse_gin([], [
        f"OpenKPTask.predict_input = '{data_dir}/OpenKPEvalPublic.tfrecord'"])
    run.run("predict", model_dir,
            predictions_dir=str(tmp_path / "public_predictions"))
  finally:
    gin.clear_config()
  pred_dir = os.path.join(model_dir, "predictions")
  with open(os.path.join(pred_dir, "predictions.jsonl")) as f:
    predictions = [json.loads(line) for line in f]
  with open(os.path.join(data_dir, "OpenKPDev.dedup.jsonl")) as f:
    dev = [json.loads(line) for line in f]
  assert [p["url"] for p in predictions] == [d["url"] for d in dev]
  for p in predictions:
    assert set(p) == {"url", "KeyPhrases"}
    phrases = [kp[0] for kp in p["KeyPhrases"]]
    assert len(phrases) == 5 and len(set(phrases)) == 5
    assert all(kp == kp.lower() for kp in phrases)
  official = results["official"]
  assert official["num_documents"] == 8
  print("openkp e2e dev scores:", official)
  for k in (1, 3, 5):
    for m in ("precision", "recall", "f1"):
      assert official[f"{m}@{k}"] == pytest.approx(
          results[f"{m}_at_{k}"], abs=1e-5), (m, k)
  with open(os.path.join(model_dir, "eval_predictions", "metrics.json")) as f:
    assert json.load(f) == official
  with open(tmp_path / "public_predictions" / "predictions.jsonl") as f:
    assert len(f.readlines()) == 4

  # 4. Export and 5. serve (in this process too, to save process starts;
  # the SavedModel has no op that calls back into Python).
  export_dir = str(tmp_path / "export")
  gin.clear_config()
  try:
    run.parse_gin(["tasks/openkp.gin", gin_file], [])
    run.run("export", model_dir, export_dir=export_dir)
  finally:
    gin.clear_config()
  (version,) = os.listdir(export_dir)
  saved = os.path.join(export_dir, version)
  record = dev[0]  # non-ASCII text
  assert "Zürich" in record["text"]
  script = f"""
import json
import tensorflow as tf
import tensorflow_text  # registers the ops of the in-graph featurizer
loaded = tf.saved_model.load({saved!r})
record = json.loads({json.dumps(json.dumps(record))})
raw = loaded.signatures["serve_raw"](text=tf.constant(record["text"]),
                                     vdom=tf.constant(record["VDOM"]))
out = {{"signatures": sorted(loaded.signatures),
       "raw": [p.decode() for p in raw["key_phrases"].numpy()],
       "raw_scores": raw["scores"].numpy().tolist(),
       "raw_lengths": raw["lengths"].numpy().tolist()}}
ex = loaded.signatures["serve_examples"](examples=examples_of(
    {os.path.join(data_dir, 'OpenKPDev.tfrecord')!r}, 2))
out["examples"] = [[p.decode() for p in row]
                   for row in ex["key_phrases"].numpy()]
feats = zero_features(loaded.signatures["serving_default"])
out["default_logits"] = loaded.signatures["serving_default"](
    **feats)["logits"].shape.as_list()
print("RESULT " + json.dumps(out))
"""
  served = e2e_testing.serve_here(script, saved)
  assert served["signatures"] == ["serve_examples", "serve_raw",
                                  "serve_raw_batch", "serving_default"]
  expected = [kp[0] for kp in predictions[0]["KeyPhrases"]]
  assert served["raw"] == expected
  assert served["examples"][0] == expected
  assert served["raw_scores"] == sorted(served["raw_scores"], reverse=True)
  assert all(1 <= n <= 5 for n in served["raw_lengths"])
  assert served["default_logits"] == [2, 5, LONG]
