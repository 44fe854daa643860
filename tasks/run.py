"""The runner binary shared by all tasks.

  python -m tasks.run --gin_file=gin/tasks/wikihop.gin \
      --gin_file=gin/models/etc_tiny.gin --gin_file=gin/strategies/cpu.gin \
      --gin_bindings='TrainerConfig.train_steps = 1000' \
      --mode=train_and_eval --model_dir=/tmp/wikihop

Flags choose what to run; gin configures everything else (task, model size,
optimizer, strategy, precision, loop settings). The operative gin config is
written to `model_dir/operative_config.gin` (train) or
`operative_config_<mode>.gin`. Running the same command again after a crash
resumes from the last checkpoint in `model_dir`.
"""

import json
import os
import sys

from absl import app
from absl import flags
from absl import logging
import gin

FLAGS = flags.FLAGS

flags.DEFINE_multi_string("gin_file", [], "Gin files, applied in order.")
flags.DEFINE_multi_string("gin_bindings", [],
                          "Gin bindings, applied after the files.")
flags.DEFINE_enum("mode", "train",
                  ["train", "eval", "train_and_eval", "predict", "export"],
                  "What to run.")
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries, configs.")
flags.DEFINE_string("export_dir", None,
                    "Export: SavedModel base dir (default model_dir/export).")
flags.DEFINE_string("checkpoint", None,
                    "eval/predict/export: checkpoint to use instead of the "
                    "latest in model_dir.")
flags.DEFINE_string("predictions_dir", None,
                    "predict: output dir (default model_dir/predictions).")

# Gin files may be given relative to the repository's gin/ folder.
GIN_ROOT = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "gin")


@gin.configurable
def task_class(cls=gin.REQUIRED):
  """The Task subclass to run (bind `task_class.cls = @WikiHopTask`)."""
  return cls


def register_tasks() -> None:
  """Imports the modules whose gin configurables the gin files bind."""
  # pylint: disable=g-import-not-at-top,unused-import
  # The training spine's configurables (TrainerConfig, build_optimizer,
  # build_strategy, set_precision, run_experiment).
  import etc_realformer.training.experiment  # noqa: F401
  import tasks.hotpotqa.task  # noqa: F401
  import tasks.nq.task  # noqa: F401
  import tasks.openkp.task  # noqa: F401
  import tasks.wikihop.scaffold  # noqa: F401  (the demo's train_scaffold)
  import tasks.wikihop.task  # noqa: F401


def parse_gin(gin_files, gin_bindings) -> None:
  gin.add_config_file_search_path(GIN_ROOT)
  gin.add_config_file_search_path(os.path.dirname(GIN_ROOT))
  gin.parse_config_files_and_bindings(gin_files, gin_bindings,
                                      finalize_config=False)


def run(mode: str, model_dir: str, **kwargs):
  """Builds the gin-configured task and runs one mode (library entry)."""
  from etc_realformer.training import experiment  # pylint: disable=g-import-not-at-top
  task = task_class()()
  return experiment.run_experiment(task, mode, model_dir, **kwargs)


# The two steps of a task binary's official `--mode=eval` (tasks.nq.runner,
# tasks.hotpotqa.runner): predict the eval input, whose prediction writer
# scores it, then file the task's score under "official".


def predict_eval_input(task, model_dir: str, checkpoint=None,
                       output_dir=None) -> str:
  """Predicts `task`'s eval input into `output_dir` (default
  `model_dir/eval_predictions`); returns that directory."""
  from etc_realformer.training import experiment  # pylint: disable=g-import-not-at-top
  # The spine predicts `predict_input`; point it at the eval files.
  task.input_patterns["predict"] = task.input_patterns["eval"]
  output_dir = output_dir or os.path.join(model_dir, "eval_predictions")
  experiment.run_experiment(task, "predict", model_dir, checkpoint=checkpoint,
                            predictions_dir=output_dir)
  return output_dir


def add_official_results(model_dir: str, official) -> None:
  """Adds `official` to `model_dir/eval_results.json` under "official"."""
  results_path = os.path.join(model_dir, "eval_results.json")
  results = {}
  if os.path.exists(results_path):
    with open(results_path, encoding="utf-8") as f:
      results = json.load(f)
  results["official"] = official
  with open(results_path, "w", encoding="utf-8") as f:
    json.dump(results, f, indent=2)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  register_tasks()
  parse_gin(FLAGS.gin_file, FLAGS.gin_bindings)
  logging.info("mode=%s model_dir=%s", FLAGS.mode, FLAGS.model_dir)
  run(FLAGS.mode, FLAGS.model_dir, export_dir=FLAGS.export_dir,
      checkpoint=FLAGS.checkpoint, predictions_dir=FLAGS.predictions_dir)


def entry(default_gin_files=(), main_fn=main) -> None:
  """Console entry; task aliases pass their default gin files first (and
  task binaries that add to a mode, their own `main_fn`)."""
  if default_gin_files:
    sys.argv[1:1] = [f"--gin_file={f}" for f in default_gin_files]
  # Required here, not at import, so that other binaries (the demo) can
  # import this module and reuse its --gin_file/--gin_bindings flags.
  flags.mark_flag_as_required("model_dir")
  app.run(main_fn)


if __name__ == "__main__":
  entry()
