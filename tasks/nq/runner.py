"""The Natural Questions binary: `python -m tasks.nq [--gin_file=...]
--mode=... --model_dir=...` (this module's `entry`).

The shared runner (`tasks.run`) with `gin/tasks/nq.gin` applied first;
further --gin_file/--gin_bindings override it. One addition: `--mode=eval`
runs the spine's eval (loss and the in-graph accuracies) and then predicts
the eval input and scores the documents with the official NQ scorer against
`NaturalQuestionsTask.gold_file`; it prints the long / short best-threshold
F1 and adds the report to `model_dir/eval_results.json` under "official".
"""

import json
import os
import sys

from absl import app
from absl import flags
from absl import logging

from tasks import run

FLAGS = flags.FLAGS
DEFAULT_GIN_FILES = ("tasks/nq.gin",)


def official_eval(model_dir: str, checkpoint=None, output_dir=None):
  """Predicts the eval input and scores it officially (see module doc).

  Returns:
    The scorer's report (`evaluate.score_dicts`).
  """
  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import experiment
  from tasks.nq import task as task_lib
  # pylint: enable=g-import-not-at-top
  task = run.task_class()()
  if not task.gold_file:
    raise ValueError("--mode=eval scores with the official NQ scorer: set "
                     "NaturalQuestionsTask.gold_file (nq-dev-??.jsonl.gz)")
  # The spine predicts `predict_input`; point it at the eval files.
  task.input_patterns["predict"] = task.input_patterns["eval"]
  output_dir = output_dir or os.path.join(model_dir, "eval_predictions")
  experiment.run_experiment(task, "predict", model_dir, checkpoint=checkpoint,
                            predictions_dir=output_dir)
  with open(os.path.join(output_dir, task_lib.SCORES_FILE),
            encoding="utf-8") as f:
    report = json.load(f)
  results_path = os.path.join(model_dir, "eval_results.json")
  results = {}
  if os.path.exists(results_path):
    with open(results_path, encoding="utf-8") as f:
      results = json.load(f)
  results["official"] = {k: v for k, v in report.items()
                         if k not in ("official", "ignoring_scores")}
  with open(results_path, "w", encoding="utf-8") as f:
    json.dump(results, f, indent=2)
  return report


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  run.register_tasks()
  run.parse_gin(FLAGS.gin_file, FLAGS.gin_bindings)
  logging.info("mode=%s model_dir=%s", FLAGS.mode, FLAGS.model_dir)
  run.run(FLAGS.mode, FLAGS.model_dir, export_dir=FLAGS.export_dir,
          checkpoint=FLAGS.checkpoint, predictions_dir=FLAGS.predictions_dir)
  if FLAGS.mode == "eval":
    report = official_eval(FLAGS.model_dir, FLAGS.checkpoint)
    print(f"eval official | long F1 {report['long_f1']:.4f} | short F1 "
          f"{report['short_f1']:.4f} | {report['num_gold']} documents",
          flush=True)


def entry() -> None:
  sys.argv[1:1] = [f"--gin_file={f}" for f in DEFAULT_GIN_FILES]
  flags.mark_flag_as_required("model_dir")
  app.run(main)
