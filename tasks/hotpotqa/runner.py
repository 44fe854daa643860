"""The HotpotQA binary: `python -m tasks.hotpotqa [--gin_file=...] --mode=...
--model_dir=...` (this module's `entry`).

The shared runner (`tasks.run`) with `gin/tasks/hotpotqa.gin` applied first;
further --gin_file/--gin_bindings override it. One addition: `--mode=eval`
runs the spine's eval (loss and in-graph metrics) and then the official
HotpotQA metric on the eval input, with the supporting-fact threshold
searched on `HotpotQATask.sp_threshold_grid`; it prints the best joint F1 and
adds the report to `model_dir/eval_results.json` under "official".
"""

import json
import os
import sys

from absl import app
from absl import flags
from absl import logging

from tasks import run

FLAGS = flags.FLAGS
DEFAULT_GIN_FILES = ("tasks/hotpotqa.gin",)


def official_eval(model_dir: str, checkpoint=None, output_dir=None):
  """Predicts on the eval input and scores it officially (see module doc).

  Returns:
    The threshold-search report (`task.THRESHOLD_SEARCH_FILE`).
  """
  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import experiment
  from tasks.hotpotqa import task as task_lib
  # pylint: enable=g-import-not-at-top
  task = run.task_class()()
  # The spine predicts `predict_input`; point it at the eval files.
  task.input_patterns["predict"] = task.input_patterns["eval"]
  output_dir = output_dir or os.path.join(model_dir, "eval_predictions")
  experiment.run_experiment(task, "predict", model_dir, checkpoint=checkpoint,
                            predictions_dir=output_dir)
  path = os.path.join(output_dir, task_lib.THRESHOLD_SEARCH_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no gold in the eval input (set "
                            "HotpotQATask.gold_file)")
  with open(path, encoding="utf-8") as f:
    report = json.load(f)
  results_path = os.path.join(model_dir, "eval_results.json")
  results = {}
  if os.path.exists(results_path):
    with open(results_path, encoding="utf-8") as f:
      results = json.load(f)
  results["official"] = {k: report[k] for k in (
      "best_threshold", "best", "sp_threshold", "at_sp_threshold")}
  with open(results_path, "w", encoding="utf-8") as f:
    json.dump(results, f, indent=2)
  return report


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  register()
  run.parse_gin(FLAGS.gin_file, FLAGS.gin_bindings)
  logging.info("mode=%s model_dir=%s", FLAGS.mode, FLAGS.model_dir)
  run.run(FLAGS.mode, FLAGS.model_dir, export_dir=FLAGS.export_dir,
          checkpoint=FLAGS.checkpoint, predictions_dir=FLAGS.predictions_dir)
  if FLAGS.mode == "eval":
    report = official_eval(FLAGS.model_dir, FLAGS.checkpoint)
    best = report["best"]
    print(f"eval official | best joint F1 {best['joint_f1']:.4f} at "
          f"threshold {report['best_threshold']:.2f} | "
          f"{json.dumps(best, sort_keys=True)}", flush=True)


def register() -> None:
  """The runner's tasks plus HotpotQA (not yet in `run.register_tasks`)."""
  run.register_tasks()
  import tasks.hotpotqa.task  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import


def entry() -> None:
  sys.argv[1:1] = [f"--gin_file={f}" for f in DEFAULT_GIN_FILES]
  flags.mark_flag_as_required("model_dir")
  app.run(main)

