"""WikiHop end to end through the binaries, on tiny files in the released
format.

qangaroo JSON + vocab.txt (`wikihop_testing`) -> `tasks.wikihop.preprocess`
-> `python -m tasks.wikihop --mode=train_and_eval` killed with SIGKILL after a
checkpoint, then the same command again (resumes, loss goes down, evaluates)
-> eval with the official accuracy and predict ({id: answer} JSON), then
export, via `tasks.run.run` -> a fresh process loads the SavedModel and
queries every signature.
"""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import gin
import pytest
import tensorflow as tf

import e2e_testing
from tasks import run
from tasks.wikihop import features as wikihop_features
import wikihop_testing

GLOBAL = wikihop_testing.GLOBAL


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  root = tmp_path_factory.mktemp("wikihop_e2e")
  data_dir = str(root / "data")
  wikihop_testing.write_tiny_wikihop(data_dir)
  wikihop_testing.preprocess(data_dir)
  gin_file = wikihop_testing.tiny_gin(data_dir, str(root / "tiny.gin"))
  return {"root": str(root), "data": data_dir, "gin": gin_file,
          "model_dir": str(root / "model")}


@pytest.mark.slow  # two binaries, a kill and a resume (~90 s)
def test_kill_resume_train_eval_predict_export_serve(workdir):
  model_dir = workdir["model_dir"]
  command = ["tasks.wikihop", f"--gin_file={workdir['gin']}",
             "--mode=train_and_eval", f"--model_dir={model_dir}"]

  # 1. Start training and SIGKILL it once a checkpoint past step 20 exists.
  log_path = os.path.join(workdir["root"], "killed.log")
  with open(log_path, "w") as log:
    proc = subprocess.Popen([sys.executable, "-m", *command],
                            cwd=e2e_testing.REPO, env=e2e_testing.env(),
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 150
    killed_after = None
    while time.time() < deadline and proc.poll() is None:
      step = e2e_testing.latest_checkpoint_step(model_dir)
      if step is not None and step >= 30:
        proc.send_signal(signal.SIGKILL)
        killed_after = step
        break
      time.sleep(0.05)
    proc.wait(timeout=30)
  with open(log_path) as f:
    killed_output = f.read()
  assert killed_after is not None, ("run ended before it could be killed:\n"
                                    + killed_output[-3000:])
  latest = tf.train.latest_checkpoint(model_dir)
  resumed_from = int(latest.rsplit("-", 1)[1])
  # A checkpoint being written at the kill (files without a state-file entry)
  # is ignored: the run resumes from the last complete one.
  assert resumed_from >= killed_after >= 30
  assert os.path.exists(os.path.join(model_dir, "operative_config.gin"))

  # 2. The same command resumes from that checkpoint and finishes.
  output = e2e_testing.run_binary(command, timeout=180)
  assert f"restored from checkpoint: {latest}" in output
  steps = e2e_testing.progress(output)
  # Training continues right after the last checkpoint: at most the steps
  # since it were lost, none repeated from the start.
  assert steps[0][0] == resumed_from + 10, steps[:3]
  assert steps[-1][0] == 100
  first_loss = e2e_testing.progress(killed_output)[0][1]
  assert first_loss == pytest.approx(1.386, abs=0.05)  # ln(4 candidates)
  assert steps[-1][1] < 0.5 * first_loss, (first_loss, steps[-5:])
  with open(os.path.join(model_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert results["step"] == 100
  assert 0.0 <= results["accuracy"] <= 1.0 and results["loss"] > 0
  # Checkpoints kept: at most max_checkpoints_to_keep.
  assert len(glob.glob(os.path.join(model_dir, "ckpt-*.index"))) <= 3
  assert glob.glob(os.path.join(model_dir, "summaries", "train", "events*"))

  # 3. Eval with the official metric, and predict (in this process, through
  # the runner's library entry, to save process starts): the official
  # {id: answer} format, scored against the labels in the TFRecords.
  run.register_tasks()
  gin.clear_config()
  try:
    run.parse_gin(["tasks/wikihop.gin", workdir["gin"]], [])
    evaluated = run.run("eval", model_dir)
    run.run("predict", model_dir)
  finally:
    gin.clear_config()
  with open(os.path.join(model_dir, "predictions", "predictions.json")) as f:
    predictions = json.load(f)
  with open(os.path.join(workdir["data"], "dev.json")) as f:
    dev = json.load(f)
  assert set(predictions) == {r["id"] for r in dev}
  for record in dev:
    assert predictions[record["id"]] in record["candidates"]
  correct = sum(predictions[r["id"]] == r["answer"] for r in dev)
  assert evaluated["official"] == {
      "accuracy": pytest.approx(correct / len(dev)), "num_correct": correct,
      "num_gold": len(dev), "num_predicted": len(dev)}
  # The in-graph accuracy is the same measurement.
  assert evaluated["accuracy"] == pytest.approx(correct / len(dev))
  with open(os.path.join(model_dir, "eval_results.json")) as f:
    assert json.load(f)["official"] == evaluated["official"]

  # 4. Export a versioned SavedModel (in this process too: a process start
  # imports TensorFlow again; the binary's flags ran in steps 1 and 2).
  export_dir = os.path.join(workdir["root"], "export")
  gin.clear_config()
  try:
    run.parse_gin(["tasks/wikihop.gin", workdir["gin"]], [])
    run.run("export", model_dir, export_dir=export_dir)
  finally:
    gin.clear_config()
  versions = os.listdir(export_dir)
  assert len(versions) == 1 and versions[0].isdigit(), versions
  saved = os.path.join(export_dir, versions[0])
  assert os.path.exists(os.path.join(saved, "saved_model.pb"))

  # 5. A fresh process (no project code imported) queries every signature.
  record = dev[0]
  # The client splits the supports (Punkt, outside the graph).
  sentences, num_sentences = wikihop_features.split_supports(
      record["supports"])
  script = f"""
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops serve_raw uses
loaded = tf.saved_model.load({saved!r})
out = {{"signatures": sorted(loaded.signatures)}}
raw = loaded.signatures["serve_raw"](
    query=tf.constant({record['query']!r}),
    candidates=tf.constant({record['candidates']!r}),
    sentences=tf.constant({sentences!r}, tf.string),
    num_sentences=tf.constant({num_sentences!r}, tf.int32))
out["raw_answer"] = raw["answer"].numpy().decode()
out["raw_probs"] = raw["candidate_probabilities"].numpy().tolist()
ex = loaded.signatures["serve_examples"](examples=examples_of(
    {workdir['data'] + '/dev.tfrecord'!r}, 2))
out["examples_prediction"] = ex["prediction"].numpy().tolist()
feats = zero_features(loaded.signatures["serving_default"])
feats["candidate_mask"] = tf.tensor_scatter_nd_update(
    feats["candidate_mask"], [[0, 0], [1, 0]], [1, 1])
dflt = loaded.signatures["serving_default"](**feats)
out["default_probs_shape"] = dflt["probabilities"].shape.as_list()
print("RESULT " + json.dumps(out))
"""
  served = e2e_testing.run_script(script, cwd=workdir["root"], timeout=120)
  assert served["signatures"] == ["serve_examples", "serve_raw",
                                  "serve_raw_batch", "serving_default"]
  assert served["raw_answer"] in record["candidates"]
  assert len(served["raw_probs"]) == len(record["candidates"])
  assert sum(served["raw_probs"]) == pytest.approx(1.0, abs=1e-4)
  # The raw path (in-graph featurizer) agrees with the batch predictions.
  assert served["raw_answer"] == predictions[record["id"]]
  assert len(served["examples_prediction"]) == 2
  assert served["default_probs_shape"] == [2, GLOBAL]
