r"""The HotpotQA demo: synthetic distractor data, end to end, on a CPU.

  python -m demos.hotpotqa.demo --output_dir=hotpot_demo

1. writes synthetic released-format data (`demos.hotpotqa.synthetic`) and
   its vocab.txt;
2. featurizes it to TFRecords (`tasks.hotpotqa.preprocess`);
3. trains a tiny ETC-RealFormer (2 layers, hidden 64, long 128, global 48,
   residual attention on) with the one runner;
4. evaluates on dev: the in-graph metrics, then the official metric with the
   supporting-fact threshold search (`HotpotQATask.official_scores`;
   `model/eval_predictions/threshold_search.json`);
5. exports a SavedModel and answers one dev record through `serve_raw`;
6. prints answer / sp / joint F1, the question-blind chance joint F1 and the
   wall time (`demo | ...` lines).

Everything goes to --output_dir (data/, model/, export/,
demo_results.json). The same with the binary: `python -m tasks.hotpotqa
--gin_file=OUTPUT_DIR/demo.gin --mode=train --model_dir=...`, then
`--mode=eval`.
"""

import json
import os
from typing import Any, Dict, List, Optional


from demos import common
from demos.hotpotqa import synthetic
from etc_realformer import cli
from tasks.hotpotqa import preprocess

LONG_SEQ_LEN = 128
GLOBAL_SEQ_LEN = 48


def demo_gin(data_dir: str, train_steps: int, seed: int) -> str:
  """The demo's gin config (also written to OUTPUT_DIR/demo.gin)."""
  train, dev = (os.path.splitext(name)[0]
                for name in (synthetic.TRAIN_FILE, synthetic.DEV_FILE))
  return common.model_gin("tasks/hotpotqa.gin", len(synthetic.vocabulary()),
                          2) + """\
etc_config.use_hard_g2l_mask = False

""" + common.task_gin("HotpotQATask", LONG_SEQ_LEN, GLOBAL_SEQ_LEN, data_dir,
                      f"{train}.tfrecord", f"{dev}.tfrecord", seed) + f"""\
HotpotQATask.max_answer_length = 8
HotpotQATask.gold_file = '{data_dir}/{synthetic.DEV_FILE}'

""" + common.trainer_gin(train_steps)


def make_data(data_dir: str, num_train: int, num_dev: int,
              seed: int) -> Dict[str, str]:
  """Synthetic JSON + vocab, then TFRecords; returns the paths of
  `synthetic.write_dataset`."""
  paths = synthetic.write_dataset(data_dir, num_train=num_train,
                                  num_dev=num_dev, seed=seed)
  featurizer = preprocess.make_featurizer(paths["vocab"], None, LONG_SEQ_LEN,
                                          GLOBAL_SEQ_LEN)
  common.featurize_splits({split: paths[split] for split in ("train", "dev")},
                          data_dir, featurizer, preprocess.preprocess_file)
  return paths


def ask(export_path: str, record: Dict[str, Any]) -> Dict[str, Any]:
  """Answers one released-format record through the SavedModel."""
  context = record["context"]
  out = common.serve(
      export_path, question=record["question"],
      titles=[t for t, _ in context],
      sentences=[s for _, ss in context for s in ss],
      num_sentences=[len(ss) for _, ss in context])
  return {"answer": out["answer"].decode("utf-8"),
          "answer_type": int(out["answer_type"]),
          "sentence_sp_probabilities": [
              round(float(p), 3) for p in out["sentence_sp_probabilities"]]}


def run_demo(output_dir: str, num_train: int = 2000, num_dev: int = 300,
             seed: int = 0, train_steps: int = 2000,
             gin_files: Optional[List[str]] = None,
             gin_bindings: Optional[List[str]] = None) -> Dict[str, Any]:
  """Runs the whole demo; returns the official dev metrics and timings."""
  clock = common.Stopwatch()
  dirs = common.DemoDirs.under(output_dir)
  paths = make_data(dirs.data, num_train, num_dev, seed)
  clock.lap("data")

  common.configure_gin(dirs, demo_gin(dirs.data, train_steps, seed),
                       gin_files, gin_bindings)
  # Eval after training: the in-graph metrics, then the official ones.
  results, export_path = common.train_and_export(dirs, clock,
                                                 ("train", "eval"))

  with open(paths["dev"], encoding="utf-8") as f:
    gold = json.load(f)
  official = results.pop("official")
  summary = {
      "official_best": official["best"],
      "best_threshold": official["best_threshold"],
      "official_at_sp_threshold": official["at_sp_threshold"],
      "chance_joint_f1": synthetic.chance_joint_f1(gold, seed),
      "in_graph_eval": results,
      "export_path": export_path,
      "question": gold[0]["question"],
      "gold": gold[0]["answer"],
      "served": ask(export_path, gold[0]),
      "seconds": clock.summary(),
  }
  common.write_results(dirs, summary)
  return summary


def summary_lines(s: Dict[str, Any]) -> List[str]:
  """The demo's closing lines (without the `demo | ` prefix)."""
  best = s["official_best"]
  return [
      f"question: {s['question']!r}",
      f"served answer (SavedModel serve_raw): {s['served']['answer']!r}; "
      f"gold: {s['gold']!r}",
      f"dev (official metric, sp threshold {s['best_threshold']}): answer "
      f"F1 {best['f1']:.4f}, sp F1 {best['sp_f1']:.4f}, joint F1 "
      f"{best['joint_f1']:.4f} (joint EM {best['joint_em']:.4f}); "
      f"question-blind chance joint F1 {s['chance_joint_f1']:.4f}",
      common.timing_line(s["seconds"]),
      f"SavedModel: {s['export_path']}",
  ]


if __name__ == "__main__":
  # Flags only when run as a binary: other demos define the same names.
  common.define_flags(output_dir="hotpot_demo", train_steps=2000)
  cli.run(common.demo_main(run_demo, summary_lines))
