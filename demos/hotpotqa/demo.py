r"""The HotpotQA demo: synthetic distractor data, end to end, on a CPU.

  python -m tasks.hotpotqa.demo --output_dir=hotpot_demo

1. writes synthetic released-format data (`tasks.hotpotqa.synthetic`) and
   its vocab.txt;
2. featurizes it to TFRecords (`tasks.hotpotqa.preprocess`);
3. trains a tiny ETC-RealFormer (2 layers, hidden 64, long 128, global 48,
   residual attention on) with the shared runner;
4. predicts on dev and scores with the official metric, searching the
   supporting-fact threshold (`threshold_search.json`);
5. exports a SavedModel and answers one dev record through `serve_raw`;
6. prints answer / sp / joint F1, the question-blind chance joint F1 and the
   wall time.

Everything goes to --output_dir (data/, model/, model/predictions/,
export/). The same training with the binary: `python -m tasks.hotpotqa
--gin_file=OUTPUT_DIR/demo.gin --mode=train --model_dir=...`, then
`--mode=eval` for the official metric.
"""

import json
import os
from typing import Dict, List, Optional

from absl import app
from absl import flags
from absl import logging

# Defines --gin_file / --gin_bindings: applied after the demo's config.
from tasks import run
from tasks.common import demo as demo_lib

DEMO_FLAGS = demo_lib.define_flags(output_dir="hotpot_demo",
                                   train_steps=2000)

LONG_SEQ_LEN = 128
GLOBAL_SEQ_LEN = 48


def demo_gin(data_dir: str, train_steps: int, seed: int) -> str:
  """The demo's gin config (also written to OUTPUT_DIR/demo.gin)."""
  from tasks.hotpotqa import synthetic  # pylint: disable=g-import-not-at-top
  return f"""\
include 'tasks/hotpotqa.gin'
include 'models/etc_tiny.gin'
include 'strategies/cpu.gin'

etc_config.vocab_size = {len(synthetic.vocabulary())}
etc_config.hidden_size = 64
etc_config.num_hidden_layers = 2
etc_config.num_attention_heads = 4
etc_config.intermediate_size = 128
etc_config.local_radius = 8
etc_config.hidden_dropout_prob = 0.0
etc_config.attention_probs_dropout_prob = 0.0
etc_config.use_hard_g2l_mask = False

HotpotQATask.long_seq_len = {LONG_SEQ_LEN}
HotpotQATask.global_seq_len = {GLOBAL_SEQ_LEN}
HotpotQATask.max_answer_length = 8
HotpotQATask.train_input = '{data_dir}/{_stem(synthetic.TRAIN_FILE)}.tfrecord'
HotpotQATask.eval_input = '{data_dir}/{_stem(synthetic.DEV_FILE)}.tfrecord'
HotpotQATask.predict_input = '{data_dir}/{_stem(synthetic.DEV_FILE)}.tfrecord'
HotpotQATask.vocab_file = '{data_dir}/vocab.txt'
HotpotQATask.gold_file = '{data_dir}/{synthetic.DEV_FILE}'
HotpotQATask.seed = {seed}

""" + demo_lib.trainer_gin(train_steps)


def _stem(name: str) -> str:
  return os.path.splitext(name)[0]


def make_data(data_dir: str, num_train: int, num_dev: int, seed: int) -> None:
  """Synthetic JSON + vocab, then TFRecords."""
  # pylint: disable=g-import-not-at-top
  from tasks.hotpotqa import preprocess
  from tasks.hotpotqa import synthetic
  # pylint: enable=g-import-not-at-top
  paths = synthetic.write_dataset(data_dir, num_train=num_train,
                                  num_dev=num_dev, seed=seed)
  featurizer = preprocess.make_featurizer(paths["vocab"], None, LONG_SEQ_LEN,
                                          GLOBAL_SEQ_LEN)
  demo_lib.featurize_splits({split: paths[split] for split in ("train", "dev")},
                            data_dir, featurizer, preprocess.preprocess_file)


def ask(export_path: str, record: Dict) -> Dict:
  """Answers one released-format record through the SavedModel."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  loaded = tf.saved_model.load(export_path)
  out = loaded.signatures["serve_raw"](
      question=tf.constant(record["question"]),
      titles=tf.constant([t for t, _ in record["context"]]),
      sentences=tf.constant([s for _, ss in record["context"] for s in ss]),
      num_sentences=tf.constant([len(ss) for _, ss in record["context"]],
                                tf.int32))
  return {"answer": out["answer"].numpy().decode("utf-8"),
          "answer_type": int(out["answer_type"].numpy()),
          "sentence_sp_probabilities": [
              round(float(p), 3)
              for p in out["sentence_sp_probabilities"].numpy()]}


def run_demo(output_dir: str, num_train: int = 2000, num_dev: int = 300,
             seed: int = 0, train_steps: int = 2000,
             gin_files: Optional[List[str]] = None,
             gin_bindings: Optional[List[str]] = None) -> Dict:
  """Runs the whole demo; returns the official dev metrics and timings."""
  # pylint: disable=g-import-not-at-top
  from tasks.hotpotqa import runner as hotpot_runner
  from tasks.hotpotqa import synthetic
  from tasks.hotpotqa import task as task_lib
  # pylint: enable=g-import-not-at-top
  clock = demo_lib.Stopwatch()
  dirs = demo_lib.DemoDirs.under(output_dir)
  data_dir, model_dir = dirs.data, dirs.model
  make_data(data_dir, num_train, num_dev, seed)
  clock.lap("data")

  hotpot_runner.register()
  demo_lib.configure_gin(dirs, demo_gin(data_dir, train_steps, seed),
                         gin_files, gin_bindings)
  train_results = run.run("train_and_eval", model_dir)
  clock.lap("train_and_eval")
  predictions_dir = os.path.join(model_dir, "predictions")
  run.run("predict", model_dir, predictions_dir=predictions_dir)
  with open(os.path.join(predictions_dir, task_lib.THRESHOLD_SEARCH_FILE),
            encoding="utf-8") as f:
    report = json.load(f)
  export_path = run.run("export", model_dir,
                        export_dir=dirs.export)["export_path"]

  with open(os.path.join(data_dir, synthetic.DEV_FILE),
            encoding="utf-8") as f:
    gold = json.load(f)
  served = ask(export_path, gold[0])
  summary = {
      "official_best": report["best"],
      "best_threshold": report["best_threshold"],
      "official_at_0.5": report["at_sp_threshold"],
      "chance_joint_f1": synthetic.chance_joint_f1(gold, seed),
      "in_graph_eval": train_results,
      "export_path": export_path,
      "question": gold[0]["question"],
      "gold": gold[0]["answer"],
      "served": served,
      "seconds": clock.summary(),
  }
  with open(os.path.join(dirs.output, "demo_results.json"), "w") as f:
    json.dump(summary, f, indent=2)
  return summary


def main(argv):
  del argv
  f = DEMO_FLAGS
  s = run_demo(f.output_dir.value, num_train=f.num_train.value,
               num_dev=f.num_dev.value, seed=f.seed.value,
               train_steps=f.train_steps.value,
               gin_files=flags.FLAGS.gin_file,
               gin_bindings=flags.FLAGS.gin_bindings)
  logging.info("demo results: %s", s)
  best = s["official_best"]
  print(f"\ndemo | question: {s['question']!r}\n"
        f"demo | served answer (SavedModel serve_raw): "
        f"{s['served']['answer']!r}; gold: {s['gold']!r}\n"
        f"demo | dev (official metric, sp threshold {s['best_threshold']}): "
        f"answer F1 {best['f1']:.4f}, sp F1 {best['sp_f1']:.4f}, joint F1 "
        f"{best['joint_f1']:.4f} (joint EM {best['joint_em']:.4f}); "
        f"question-blind chance joint F1 {s['chance_joint_f1']:.4f}\n"
        f"demo | wall time: {s['seconds']['total']:.0f} s "
        f"(data {s['seconds']['data']:.0f} s, train+eval "
        f"{s['seconds']['train_and_eval']:.0f} s)\n"
        f"demo | SavedModel: {s['export_path']}", flush=True)


if __name__ == "__main__":
  app.run(main)
