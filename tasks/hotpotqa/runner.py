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

from absl import flags

from tasks import run

FLAGS = flags.FLAGS
DEFAULT_GIN_FILES = ("tasks/hotpotqa.gin",)


def official_eval(model_dir: str, checkpoint=None, output_dir=None):
  """Predicts on the eval input and scores it officially (see module doc).

  Returns:
    The threshold-search report (`task.THRESHOLD_SEARCH_FILE`).
  """
  from tasks.hotpotqa import task as task_lib  # pylint: disable=g-import-not-at-top
  task = run.task_class()()
  output_dir = run.predict_eval_input(task, model_dir, checkpoint, output_dir)
  path = os.path.join(output_dir, task_lib.THRESHOLD_SEARCH_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no gold in the eval input (set "
                            "HotpotQATask.gold_file)")
  with open(path, encoding="utf-8") as f:
    report = json.load(f)
  run.add_official_results(model_dir, {k: report[k] for k in (
      "best_threshold", "best", "sp_threshold", "at_sp_threshold")})
  return report


def main(argv):
  run.main(argv)
  if FLAGS.mode == "eval":
    report = official_eval(FLAGS.model_dir, FLAGS.checkpoint)
    best = report["best"]
    print(f"eval official | best joint F1 {best['joint_f1']:.4f} at "
          f"threshold {report['best_threshold']:.2f} | "
          f"{json.dumps(best, sort_keys=True)}", flush=True)


def register() -> None:
  """The gin configurables the HotpotQA gin files bind (the runner's)."""
  run.register_tasks()


def entry() -> None:
  run.entry(DEFAULT_GIN_FILES, main_fn=main)
