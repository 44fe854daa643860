"""End to end through the binaries, on tiny files in the real formats.

qangaroo JSON + vocab.txt (written here) -> `tasks.wikihop.preprocess` ->
`python -m tasks.wikihop --mode=train_and_eval` killed with SIGKILL after a
checkpoint, then the same command again (resumes, loss goes down, evaluates)
-> predict ({id: answer} JSON, via `tasks.run.run`) -> `--mode=export`
-> a fresh process loads the SavedModel and queries every signature.
"""

import glob
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG, GLOBAL = 128, 32

_WORDS = [f"w{i}" for i in range(60)]
_ENTITIES = [f"ent{i}" for i in range(30)]


def write_tiny_wikihop(out_dir: str, num_train: int = 48, num_dev: int = 8,
                       seed: int = 0) -> None:
  """qangaroo-format train.json/dev.json and a WordPiece vocab.txt.

  Each record has 4 candidates; one support says "<subject> located in
  <answer> ." and the query is "country <subject>", so the answer is
  learnable from the supports.
  """
  rng = random.Random(seed)
  vocab = (["[PAD]"] + [f"[unused{i}]" for i in range(10)] +
           ["[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + _WORDS +
           _ENTITIES + ["located", "in", "country"])
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "vocab.txt"), "w") as f:
    f.write("\n".join(vocab) + "\n")

  def filler(n):
    return " ".join(rng.choice(_WORDS) for _ in range(n))

  def record(i, split):
    candidates = rng.sample(_ENTITIES, 4)
    answer = rng.choice(candidates)
    subject = rng.choice(_WORDS)
    supports = [f"{filler(5)} . {filler(4)} ." for _ in range(3)]
    supports.insert(rng.randrange(4),
                    f"{subject} located in {answer} . {filler(4)} .")
    return {"id": f"WH_{split}_{i}", "query": f"country {subject}",
            "candidates": candidates, "answer": answer, "supports": supports}

  for split, n in (("train", num_train), ("dev", num_dev)):
    with open(os.path.join(out_dir, f"{split}.json"), "w") as f:
      json.dump([record(i, split) for i in range(n)], f)


def preprocess(data_dir: str) -> None:
  from tasks.wikihop import preprocess as prep  # pylint: disable=g-import-not-at-top
  featurizer = prep.make_featurizer(os.path.join(data_dir, "vocab.txt"), None,
                                    LONG, GLOBAL)
  for split in ("train", "dev"):
    stats = prep.preprocess_file(os.path.join(data_dir, f"{split}.json"),
                                 data_dir, featurizer)
    assert stats.examples_written == stats.examples_read > 0


def tiny_gin(data_dir: str, path: str, **extra) -> str:
  lines = [
      "include 'models/etc_tiny.gin'",
      "etc_config.vocab_size = 120",
      "etc_config.hidden_size = 32",
      "etc_config.intermediate_size = 64",
      "etc_config.num_hidden_layers = 2",
      f"WikiHopTask.long_seq_len = {LONG}",
      f"WikiHopTask.global_seq_len = {GLOBAL}",
      f"WikiHopTask.train_input = '{data_dir}/train.tfrecord'",
      f"WikiHopTask.eval_input = '{data_dir}/dev.tfrecord'",
      f"WikiHopTask.predict_input = '{data_dir}/dev.tfrecord'",
      f"WikiHopTask.vocab_file = '{data_dir}/vocab.txt'",
      "WikiHopTask.seed = 1",
      # From scratch, WikiHop's candidate global tokens start identical (same
      # id, near-uniform attention): a wider init and no dropout noise let the
      # 100-step run leave that symmetric start reliably.
      "etc_config.initializer_range = 0.1",
      "etc_config.hidden_dropout_prob = 0.0",
      "etc_config.attention_probs_dropout_prob = 0.0",
      "optimizer.learning_rate = 3e-3",
      "TrainerConfig.train_batch_size = 8",
      "TrainerConfig.eval_batch_size = 8",
      "TrainerConfig.train_steps = 100",
      "TrainerConfig.steps_per_loop = 10",
      "TrainerConfig.checkpoint_interval = 20",
      "TrainerConfig.max_checkpoints_to_keep = 3",
      "TrainerConfig.eval_interval = 100",
  ] + [f"{k} = {v}" for k, v in extra.items()]
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  return path


def _env():
  env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2",
             CUDA_VISIBLE_DEVICES="")
  return env


def run_binary(args, timeout=180) -> str:
  proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=_env(),
                        capture_output=True, text=True, timeout=timeout)
  output = proc.stdout + proc.stderr
  assert proc.returncode == 0, output[-4000:]
  return output


def progress(output: str):
  """[(step, loss)] from the runner's progress lines."""
  return [(int(s), float(l)) for s, l in re.findall(
      r"^progress \| step (\d+)/\d+ \| loss ([\d.naninf]+)", output, re.M)]


def _latest_checkpoint_step(model_dir: str):
  """Step of the last checkpoint recorded in the `checkpoint` state file."""
  try:
    with open(os.path.join(model_dir, "checkpoint")) as f:
      match = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', f.read(),
                        re.M)
  except OSError:
    return None
  return int(match.group(1)) if match else None


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  root = tmp_path_factory.mktemp("wikihop_e2e")
  data_dir = str(root / "data")
  write_tiny_wikihop(data_dir)
  preprocess(data_dir)
  gin_file = tiny_gin(data_dir, str(root / "tiny.gin"))
  return {"root": str(root), "data": data_dir, "gin": gin_file,
          "model_dir": str(root / "model")}


def test_kill_resume_train_eval_predict_export_serve(workdir):
  model_dir = workdir["model_dir"]
  command = ["tasks.wikihop", f"--gin_file={workdir['gin']}",
             "--mode=train_and_eval", f"--model_dir={model_dir}"]

  # 1. Start training and SIGKILL it once a checkpoint past step 20 exists.
  log_path = os.path.join(workdir["root"], "killed.log")
  with open(log_path, "w") as log:
    proc = subprocess.Popen([sys.executable, "-m", *command], cwd=REPO,
                            env=_env(), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 150
    killed_after = None
    while time.time() < deadline and proc.poll() is None:
      step = _latest_checkpoint_step(model_dir)
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
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  latest = tf.train.latest_checkpoint(model_dir)
  resumed_from = int(latest.rsplit("-", 1)[1])
  # A checkpoint being written at the kill (files without a state-file entry)
  # is ignored: the run resumes from the last complete one.
  assert resumed_from >= killed_after >= 30
  assert os.path.exists(os.path.join(model_dir, "operative_config.gin"))

  # 2. The same command resumes from that checkpoint and finishes.
  output = run_binary(command)
  assert f"restored from checkpoint: {latest}" in output
  steps = progress(output)
  # Training continues right after the last checkpoint: at most the steps
  # since it were lost, none repeated from the start.
  assert steps[0][0] == resumed_from + 10, steps[:3]
  assert steps[-1][0] == 100
  first_loss = progress(killed_output)[0][1]
  assert first_loss == pytest.approx(1.386, abs=0.05)  # ln(4 candidates)
  assert steps[-1][1] < 0.5 * first_loss, (first_loss, steps[-5:])
  with open(os.path.join(model_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert results["step"] == 100
  assert 0.0 <= results["accuracy"] <= 1.0 and results["loss"] > 0
  # Checkpoints kept: at most max_checkpoints_to_keep.
  assert len(glob.glob(os.path.join(model_dir, "ckpt-*.index"))) <= 3
  assert glob.glob(os.path.join(model_dir, "summaries", "train", "events*"))

  # 3. Predict (in this process, through the runner's library entry, to
  # save a process start): the official {id: answer} format.
  import gin  # pylint: disable=g-import-not-at-top
  from tasks import run  # pylint: disable=g-import-not-at-top
  run.register_tasks()
  gin.clear_config()
  try:
    run.parse_gin(["tasks/wikihop.gin", workdir["gin"]], [])
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

  # 4. Export a versioned SavedModel.
  export_dir = os.path.join(workdir["root"], "export")
  output = run_binary(["tasks.wikihop", f"--gin_file={workdir['gin']}",
                       "--mode=export", f"--model_dir={model_dir}",
                       f"--export_dir={export_dir}"])
  versions = os.listdir(export_dir)
  assert len(versions) == 1 and versions[0].isdigit(), versions
  saved = os.path.join(export_dir, versions[0])
  assert os.path.exists(os.path.join(saved, "saved_model.pb"))

  # 5. A fresh process (no project code imported) queries every signature.
  record = dev[0]
  script = f"""
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops serve_raw uses
loaded = tf.saved_model.load({saved!r})
out = {{"signatures": sorted(loaded.signatures)}}
raw = loaded.signatures["serve_raw"](
    query=tf.constant({record['query']!r}),
    candidates=tf.constant({record['candidates']!r}),
    supports=tf.constant({record['supports']!r}))
out["raw_answer"] = raw["answer"].numpy().decode()
out["raw_probs"] = raw["candidate_probabilities"].numpy().tolist()
examples = [r for r in tf.data.TFRecordDataset({workdir['data'] + '/dev.tfrecord'!r}).take(2)]
ex = loaded.signatures["serve_examples"](examples=tf.stack(examples))
out["examples_prediction"] = ex["prediction"].numpy().tolist()
spec = loaded.signatures["serving_default"].structured_input_signature[1]
feats = {{k: tf.zeros([2] + s.shape[1:].as_list(), s.dtype)
         for k, s in spec.items()}}
feats["candidate_mask"] = tf.tensor_scatter_nd_update(
    feats["candidate_mask"], [[0, 0], [1, 0]], [1, 1])
dflt = loaded.signatures["serving_default"](**feats)
out["default_probs_shape"] = dflt["probabilities"].shape.as_list()
print("RESULT " + json.dumps(out))
"""
  proc = subprocess.run([sys.executable, "-c", script], env=_env(),
                        capture_output=True, text=True, timeout=120,
                        cwd=workdir["root"])
  assert proc.returncode == 0, proc.stderr[-4000:]
  served = json.loads(proc.stdout.split("RESULT ", 1)[1])
  assert served["signatures"] == ["serve_examples", "serve_raw",
                                  "serving_default"]
  assert served["raw_answer"] in record["candidates"]
  assert len(served["raw_probs"]) == len(record["candidates"])
  assert sum(served["raw_probs"]) == pytest.approx(1.0, abs=1e-4)
  # The raw path (in-graph featurizer) agrees with the batch predictions.
  assert served["raw_answer"] == predictions[record["id"]]
  assert len(served["examples_prediction"]) == 2
  assert served["default_probs_shape"] == [2, GLOBAL]
