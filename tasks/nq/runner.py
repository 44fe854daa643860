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

from absl import flags

from tasks import run

FLAGS = flags.FLAGS
DEFAULT_GIN_FILES = ("tasks/nq.gin",)


def official_eval(model_dir: str, checkpoint=None, output_dir=None):
  """Predicts the eval input and scores it officially (see module doc).

  Returns:
    The scorer's report (`evaluate.score_dicts`).
  """
  from tasks.nq import task as task_lib  # pylint: disable=g-import-not-at-top
  task = run.task_class()()
  if not task.gold_file:
    raise ValueError("--mode=eval scores with the official NQ scorer: set "
                     "NaturalQuestionsTask.gold_file (nq-dev-??.jsonl.gz)")
  output_dir = run.predict_eval_input(task, model_dir, checkpoint, output_dir)
  with open(os.path.join(output_dir, task_lib.SCORES_FILE),
            encoding="utf-8") as f:
    report = json.load(f)
  run.add_official_results(model_dir, {
      k: v for k, v in report.items()
      if k not in ("official", "ignoring_scores")})
  return report


def main(argv):
  run.main(argv)
  if FLAGS.mode == "eval":
    report = official_eval(FLAGS.model_dir, FLAGS.checkpoint)
    print(f"eval official | long F1 {report['long_f1']:.4f} | short F1 "
          f"{report['short_f1']:.4f} | {report['num_gold']} documents",
          flush=True)


def entry() -> None:
  run.entry(DEFAULT_GIN_FILES, main_fn=main)
