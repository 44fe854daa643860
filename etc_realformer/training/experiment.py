"""Runs one mode (train, eval, train_and_eval, predict, export) of a task.

Task-agnostic: everything task-specific comes from the
`etc_realformer.training.task.Task` object. Everything tunable is gin
(`TrainerConfig`, `build_optimizer`, `build_strategy`, `set_precision`, the
task class, `etc_config` and `execution_config`).
"""

import contextlib
import dataclasses
import json
import logging as logging_lib
import os
import re
import tempfile
from typing import Any, Dict, List, Optional

from absl import logging
import gin
import orbit
import tensorflow as tf
import tf_keras

from etc_realformer.checkpoints import initialization
from etc_realformer.checkpoints.paths import list_checkpoint_variables
from etc_realformer.checkpoints.paths import resolve_checkpoint_path
from etc_realformer.checkpoints.paths import UNREADABLE
from etc_realformer.checkpoints.paths import unreadable_detail
from etc_realformer.errors import UserInputError
from etc_realformer.export import saved_model
from etc_realformer.training import config_checks
from etc_realformer.training import distribution
from etc_realformer.training import model_dir_lock
from etc_realformer.training import optimization
from etc_realformer.training import trainer as trainer_lib

MODES = ("train", "eval", "train_and_eval", "predict", "export")
# What training appends to in model_dir (`trainer.HistoryAction`): one JSON
# line per training loop (its mean loss and learning rate) and per
# evaluation of train_and_eval (its metrics), {"step": N, "metrics": {...}};
# read them with `trainer.read_history`. A resumed run first drops the
# lines after the step it restored (`trainer.truncate_history`).
TRAIN_HISTORY_FILE = "train_history.jsonl"
EVAL_HISTORY_FILE = "eval_history.jsonl"


@gin.configurable
@dataclasses.dataclass
class TrainerConfig:
  """Loop settings.

  Attributes:
    train_steps: optimizer steps in total (a resumed run stops there too).
    train_batch_size: global batch per optimizer step (over all replicas and
      accumulation steps).
    eval_batch_size: global eval/predict batch.
    grad_accum_steps: micro-batches per optimizer step (each of
      train_batch_size / grad_accum_steps examples).
    eval_steps: eval batches per evaluation; -1 = the whole eval set.
    eval_interval: in train_and_eval, evaluate every N steps.
    steps_per_loop: steps per host loop (one progress line per loop).
    checkpoint_interval: save every N steps (a killed run loses at most the
      steps since the last save).
    max_checkpoints_to_keep: K, older checkpoints are deleted.
    summary_interval: TensorBoard summary every N steps (a multiple of
      steps_per_loop); None = every loop.
    init_checkpoint: a released ETC checkpoint (directory or prefix), or a
      TF2 checkpoint of an encoder or of a task model; used only when the
      model_dir holds no checkpoint yet.
    jit_compile: XLA-compile the forward/backward pass. On CPU it is off by
      default: it takes more memory above 4096 tokens, where attention
      chunking is off under XLA (docs/benchmarks.md, "XLA is off by default
      on CPU").
    deterministic: TensorFlow's op determinism
      (`tf.config.experimental.enable_op_determinism`, as
      TF_DETERMINISTIC_OPS=1), so that with the task's seed one command
      gives one loss curve; ops without a deterministic kernel then raise.
  """
  train_steps: int = 1000
  train_batch_size: int = 32
  eval_batch_size: int = 32
  grad_accum_steps: int = 1
  eval_steps: int = -1
  eval_interval: int = 1000
  steps_per_loop: int = 100
  checkpoint_interval: int = 1000
  max_checkpoints_to_keep: int = 5
  summary_interval: Optional[int] = None
  init_checkpoint: Optional[str] = None
  jit_compile: bool = False
  deterministic: bool = False


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.cluster_spec().as_dict():
    return True
  task_type, task_id = resolver.task_type, resolver.task_id
  return task_type in (None, "chief") or (
      task_type == "worker" and task_id == 0 and
      "chief" not in resolver.cluster_spec().as_dict())


def _write_dir(model_dir: str, strategy: tf.distribute.Strategy) -> str:
  """Where this worker writes: model_dir on the chief, a scratch dir else.

  Under MultiWorkerMirroredStrategy every worker must take part in saving (the
  save is collective) but only the chief's files are kept. The scratch dir is
  new (`mkdtemp`): its checkpoint manager then finds nothing to restore, and
  the worker resumes from the chief's latest checkpoint (`init_fn`). A
  killed worker leaves its scratch dir behind, and a name made of the pid
  alone can come back to a later worker given the same pid, which would
  resume from that stale checkpoint, out of step with the chief.
  """
  if _is_chief(strategy):
    return model_dir
  task_id = strategy.cluster_resolver.task_id
  return tempfile.mkdtemp(prefix=f"etc_worker_{task_id}_")


def _save_operative_config(model_dir: str, mode: str) -> None:
  name = ("operative_config.gin" if mode in ("train", "train_and_eval")
          else f"operative_config_{mode}.gin")
  model_dir_lock.make_output_dir(model_dir, "model_dir")
  with tf.io.gfile.GFile(os.path.join(model_dir, name), "w") as f:
    f.write(gin.operative_config_str())


def _distributed(strategy, task, mode: str, global_batch_size: int):
  return strategy.distribute_datasets_from_function(
      lambda ctx: task.build_inputs(mode, global_batch_size, ctx))


def _to_python(results: Dict[str, Any]) -> Dict[str, float]:
  return {k: float(orbit.utils.get_value(v)) for k, v in results.items()}


def build_model(task, strategy: tf.distribute.Strategy) -> tf_keras.Model:
  """Builds the task model under the strategy and creates its variables."""
  with strategy.scope():
    model = task.build_model()
    model(task.dummy_features(), training=False)
  return model


def restore_checked(checkpoint: tf.train.Checkpoint, path: str,
                    partial: bool = False) -> None:
  """As `_restore_checked`, for a checkpoint of any path a user gives: a
  damaged or foreign file is a UserInputError naming it."""
  try:
    _restore_checked(checkpoint, path, partial)
  except UNREADABLE as e:
    raise UserInputError(f"{path}: the checkpoint cannot be read "
                         f"({unreadable_detail(e)})") from e


def _restore_checked(checkpoint: tf.train.Checkpoint, path: str,
                     partial: bool = False) -> None:
  """Restores `path` into `checkpoint`, or raises UserInputError, one line
  naming the checkpoint (and the model's variables it has no value for)
  when it does not fit the model, i.e. the model was built from another
  config than the one that wrote it. `partial`: the checkpoint may hold
  more than the model (an optimizer's slots)."""
  def fail(detail: str):
    raise UserInputError(
        f"{path}: the checkpoint does not fit the model built from this "
        f"config (another model size or task option?); {detail}") from None

  try:
    status = checkpoint.restore(path)
  except ValueError as e:  # a variable of another shape
    fail(str(e).splitlines()[0])
  if partial:
    status = status.expect_partial()
  try:
    status.assert_existing_objects_matched()
  except AssertionError as e:
    names = sorted(set(re.findall(r"<tf\.Variable '([^']+)'", str(e))))
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    fail(f"{len(names) or 'some'} of the model's variables have no value "
         f"in it: {shown or str(e).splitlines()[0]}")


def _report_start(restored: Optional[str], step: int, model_dir: str,
                  config: TrainerConfig) -> None:
  """One line that tells a resumed run from a fresh start."""
  if restored:
    line = f"train | resumed from step {step} of checkpoint {restored}"
  elif config.init_checkpoint:
    line = (f"train | fresh start (no checkpoint in {model_dir}), encoder "
            f"from {config.init_checkpoint}")
  else:
    line = f"train | fresh start (no checkpoint in {model_dir})"
  logging.info("%s", line)
  print(line, flush=True)


def _restorable_part(checkpoint: tf.train.Checkpoint,
                     path: str) -> tf.train.Checkpoint:
  """`checkpoint`, less its input iterator when `path` holds none (written
  before the input position was saved): the run resumes its weights and
  restarts its input, warned, instead of failing as a checkpoint of
  another model."""
  iterator = getattr(checkpoint, "iterator", None)
  if iterator is None or any(name.startswith("iterator/") for name, _ in
                             tf.train.list_variables(path)):
    return checkpoint
  logging.warning("%s holds no input position: the training input restarts",
                  path)
  return tf.train.Checkpoint(model=checkpoint.model,
                             optimizer=checkpoint.optimizer)


def restore_latest_readable(checkpoint: tf.train.Checkpoint,
                            paths: List[str], directory: str) -> str:
  """Restores the newest of `paths` (oldest first, as a CheckpointManager
  lists them) that can be read, through `_restore_checked`; returns it.

  A checkpoint that cannot be read (a truncated or damaged file: a disk that
  filled up or a copy cut short) is named in a warning and the one before
  it is tried; one that reads but does not fit the model is the user's
  mistake and raised at once. Every worker of a multi-worker run reads the
  same files, so all of them restore the same checkpoint.

  Raises:
    UserInputError: none can be read, or the newest readable does not fit.
  """
  for path in reversed(paths):
    try:
      part = _restorable_part(checkpoint, path)
      # Without the iterator, the old checkpoint's save counter is unused.
      _restore_checked(part, path, partial=part is not checkpoint)
      return path
    except UNREADABLE as e:
      logging.warning("%s: the checkpoint cannot be read (%s); trying the "
                      "one before it", path, unreadable_detail(e))
  raise UserInputError(
      f"model_dir {directory}: none of its checkpoints can be read "
      f"({', '.join(os.path.basename(p) for p in paths)}); move them aside "
      "to train from the start")


class CheckedCheckpointManager(tf.train.CheckpointManager):
  """`tf.train.CheckpointManager` whose `restore_or_initialize` (what orbit's
  Controller calls to resume) restores through `restore_latest_readable`:
  the parent restores the latest without any check, so a model_dir written
  with another config raised a traceback (a variable of another shape) or
  silently kept initial values (a variable it lacks), and a truncated
  latest checkpoint stopped the run although older ones were intact. One
  restore either way: under a multi-worker strategy every worker must run
  the same restore ops. `save` names the directory when writing fails (a
  full disk's error names no file). `restored`: the checkpoint it resumed
  from, or None."""

  restored: Optional[str] = None

  def restore_or_initialize(self):
    if self.latest_checkpoint is None:
      return super().restore_or_initialize()
    restored = restore_latest_readable(self.checkpoint, self.checkpoints,
                                       self.directory)
    self.restored = restored
    if self.checkpoint_interval is not None:
      # As the parent: the interval counts from the restored step.
      self._last_checkpoint_step = int(self._step_counter.numpy())  # pylint: disable=protected-access
    return restored

  def save(self, *args, **kwargs):
    try:
      return super().save(*args, **kwargs)
    except tf.errors.OpError as e:
      step = getattr(self, "_step_counter", None)  # with an interval only
      which = f" of step {int(step.numpy())}" if step is not None else ""
      raise OSError(f"{self.directory}: cannot save the checkpoint{which} "
                    f"({e.message or type(e).__name__})") from e


def restore_for_inference(model: tf_keras.Model, model_dir: str,
                          checkpoint: Optional[str] = None) -> str:
  """Restores model weights (not the optimizer) from a training checkpoint."""
  path = checkpoint or tf.train.latest_checkpoint(model_dir)
  if not path:
    raise FileNotFoundError(f"no checkpoint in {model_dir}; train first or "
                            "pass --checkpoint")
  # A directory, a prefix, or a file that is no checkpoint (named).
  path = resolve_checkpoint_path(path)
  list_checkpoint_variables(path)
  restore_checked(tf.train.Checkpoint(model=model), path, partial=True)
  logging.info("Restored model weights from %s", path)
  return path


@gin.configurable(denylist=["task", "mode", "model_dir"])
def run_experiment(task, mode: str, model_dir: str,
                   export_dir: Optional[str] = None,
                   checkpoint: Optional[str] = None,
                   predictions_dir: Optional[str] = None,
                   config: Optional[TrainerConfig] = None) -> Dict[str, Any]:
  """Runs `mode`; returns a summary dict (metrics, paths).

  Args:
    task: a `etc_realformer.training.task.Task`.
    mode: one of MODES.
    model_dir: checkpoints, summaries, operative config.
    export_dir: base of the versioned SavedModels (default model_dir/export).
    checkpoint: eval/predict/export from this checkpoint instead of the latest.
    predictions_dir: where predict writes (default model_dir/predictions).
    config: loop settings (default: `TrainerConfig()` from gin).
  """
  if mode not in MODES:
    raise ValueError(f"mode {mode!r} is not one of {MODES}")
  config = config or TrainerConfig()
  precision = distribution.set_precision()
  strategy = distribution.build_strategy()
  config_checks.check_trainer_config(config, mode,
                                     strategy.num_replicas_in_sync)
  logging.info("Strategy %s with %d replicas, precision %s",
               type(strategy).__name__, strategy.num_replicas_in_sync,
               precision or "float32")
  if config.deterministic:
    tf.config.experimental.enable_op_determinism()
  if task.seed is not None:
    # tf_keras's form: it also seeds tf_keras's own seed generator, which
    # tf.random.set_seed alone would not (both clear TF's kernel cache).
    # The task's seed also draws the initialisation (and the per-call
    # dropout seeds, which come from TensorFlow's global generator), so
    # that one seed names one run rather than only its data order.
    tf_keras.utils.set_random_seed(task.seed)
  if mode in ("train", "train_and_eval"):
    # One writer per model_dir, the chief, locked before the model is built
    # so that a second run fails at once. The other workers write to
    # scratch dirs of their own: they take no lock and cannot wait on it.
    with (model_dir_lock.hold(model_dir) if _is_chief(strategy)
          else contextlib.nullcontext()):
      return _train(task, build_model(task, strategy), strategy, mode,
                    model_dir, config, precision)

  model = build_model(task, strategy)
  _save_operative_config(model_dir, mode)
  restored = restore_for_inference(model, model_dir, checkpoint)
  if mode == "eval":
    evaluator = trainer_lib.EtcEvaluator(
        task, model, strategy,
        _distributed(strategy, task, "eval", config.eval_batch_size))
    results: Dict[str, Any] = _to_python(evaluator.evaluate(
        tf.constant(config.eval_steps, tf.int32)))
    print(f"eval | {json.dumps(results, sort_keys=True)}", flush=True)
    official = official_eval(
        task, model, strategy, config.eval_batch_size,
        predictions_dir or os.path.join(model_dir, "eval_predictions"))
    if official is not None:
      results["official"] = official
      print(f"eval official | {json.dumps(official, sort_keys=True)}",
            flush=True)
    if _is_chief(strategy):
      with tf.io.gfile.GFile(os.path.join(model_dir, "eval_results.json"),
                             "w") as f:
        json.dump({"checkpoint": restored, **results}, f, indent=2)
    return results
  if mode == "predict":
    predictions = trainer_lib.predict(
        task, model, strategy,
        _distributed(strategy, task, "predict", config.eval_batch_size))
    out_dir = predictions_dir or os.path.join(model_dir, "predictions")
    model_dir_lock.make_output_dir(out_dir, "predictions_dir")
    path = task.write_predictions(predictions, out_dir)
    print(f"predictions | {path}", flush=True)
    return {"predictions_file": path}
  # export
  export_dir = export_dir or os.path.join(model_dir, "export")
  model_dir_lock.make_output_dir(export_dir, "export_dir")
  path = saved_model.export_task_model(task, model, export_dir)
  print(f"export | {path}", flush=True)
  return {"export_path": path}


def official_eval(task, model: tf_keras.Model,
                  strategy: tf.distribute.Strategy, batch_size: int,
                  output_dir: str) -> Optional[Dict[str, Any]]:
  """Predicts the eval input and scores it with the task's official metric.

  Returns:
    `task.official_scores(...)`, or None for a task without one.
  """
  if not task.has_official_scores():
    return None
  predictions = trainer_lib.predict(
      task, model, strategy, _distributed(strategy, task, "eval",
                                          batch_size))
  tf.io.gfile.makedirs(output_dir)
  task.write_predictions(predictions, output_dir)
  return task.official_scores(predictions, output_dir)


class OrbitPrintedLines(logging_lib.Filter):
  """Drops the orbit Controller's info records: orbit prints each of them
  to stdout as well as logging it (`orbit.controller._log`), so a console
  showed every controller line twice. The printed copy stays."""

  def filter(self, record: logging_lib.LogRecord) -> bool:
    return not (record.levelno == logging_lib.INFO and
                record.pathname.endswith(os.path.join("orbit",
                                                      "controller.py")))


def _log_orbit_lines_once() -> None:
  handler = logging.get_absl_handler()
  if not any(isinstance(f, OrbitPrintedLines) for f in handler.filters):
    handler.addFilter(OrbitPrintedLines())


def _checkpointed_iterator(strategy, task, micro_batch: int):
  """The training input's iterator, and whether a checkpoint can hold it.

  Saved with the model, it resumes a killed run at the batch where the
  checkpoint was written (the shuffle buffer included) instead of
  restarting the shuffle. tf.distribute's iterators of several replicas are
  not trackable: there a resumed run restarts its input (warned).
  """
  iterator = iter(_distributed(strategy, task, "train", micro_batch))
  if isinstance(iterator, tf.__internal__.tracking.Trackable):
    return iterator, True
  logging.warning("%s's input iterator cannot be checkpointed: a resumed "
                  "run restarts its input", type(strategy).__name__)
  return iterator, False


def _train(task, model, strategy, mode, model_dir, config: TrainerConfig,
           precision: Optional[str]) -> Dict[str, Any]:
  _log_orbit_lines_once()
  if config.train_batch_size % (config.grad_accum_steps *
                                strategy.num_replicas_in_sync):
    raise ValueError(
        f"train_batch_size {config.train_batch_size} must be divisible by "
        f"grad_accum_steps x replicas = {config.grad_accum_steps} x "
        f"{strategy.num_replicas_in_sync}")
  micro_batch = config.train_batch_size // config.grad_accum_steps
  with strategy.scope():
    optimizer = optimization.build_optimizer(train_steps=config.train_steps)
    if precision == "float16":
      optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
    # Create the optimizer slots now so that checkpoint restores fill them
    # immediately instead of deferring.
    if hasattr(optimizer, "_create_all_weights"):
      optimizer._create_all_weights(model.trainable_variables)  # pylint: disable=protected-access
  global_step = optimizer.iterations
  write_dir = _write_dir(model_dir, strategy)
  train_iterator, saved_input = _checkpointed_iterator(strategy, task,
                                                       micro_batch)
  checkpoint = tf.train.Checkpoint(
      model=model, optimizer=optimizer,
      **({"iterator": train_iterator} if saved_input else {}))
  restored: List[str] = []  # the checkpoint resumed from, if any

  def init_fn():
    state = tf.train.get_checkpoint_state(model_dir)
    if state and write_dir != model_dir:  # non-chief worker resuming
      restored.append(restore_latest_readable(
          checkpoint, list(state.all_model_checkpoint_paths), model_dir))
      # The chief's line (orbit's) on every worker, so each log says where
      # its run resumed.
      print(f"restored from checkpoint: {restored[-1]}", flush=True)
    elif config.init_checkpoint:
      initialization.initialize_encoder(model.encoder, config.init_checkpoint)

  manager = CheckedCheckpointManager(
      checkpoint, directory=write_dir,
      max_to_keep=config.max_checkpoints_to_keep, step_counter=global_step,
      checkpoint_interval=config.checkpoint_interval, init_fn=init_fn)
  # orbit takes an iterator as its dataset (`iter` of it is itself).
  trainer = trainer_lib.EtcTrainer(task, model, optimizer, strategy,
                                   train_iterator,
                                   grad_accum_steps=config.grad_accum_steps,
                                   jit_compile=config.jit_compile)
  evaluator = None
  if mode == "train_and_eval":
    evaluator = trainer_lib.EtcEvaluator(
        task, model, strategy,
        _distributed(strategy, task, "eval", config.eval_batch_size))
  summary_root = write_dir

  def history(name: str) -> trainer_lib.HistoryAction:
    # The chief's only: the other workers' would be the same numbers.
    return trainer_lib.HistoryAction(
        global_step,
        os.path.join(model_dir, name) if _is_chief(strategy) else None)

  progress = trainer_lib.ProgressAction(global_step, config.train_steps)
  controller = orbit.Controller(
      strategy=strategy, trainer=trainer, evaluator=evaluator,
      global_step=global_step, steps_per_loop=config.steps_per_loop,
      checkpoint_manager=manager,
      summary_interval=config.summary_interval,
      summary_dir=os.path.join(summary_root, "summaries", "train"),
      eval_summary_dir=os.path.join(summary_root, "summaries", "eval"),
      train_actions=[progress, history(TRAIN_HISTORY_FILE)],
      eval_actions=[history(EVAL_HISTORY_FILE)])
  progress.start()  # the Controller has restored the checkpoint
  _report_start(manager.restored or (restored[0] if restored else None),
                int(global_step.numpy()), model_dir, config)
  if _is_chief(strategy):
    # What a killed run logged after its last checkpoint is trained again.
    for name in (TRAIN_HISTORY_FILE, EVAL_HISTORY_FILE):
      trainer_lib.truncate_history(os.path.join(model_dir, name),
                                   int(global_step.numpy()))
    _save_operative_config(model_dir, mode)
  results: Dict[str, Any] = {}
  if mode == "train":
    controller.train(steps=config.train_steps)
  else:
    output = controller.train_and_evaluate(
        train_steps=config.train_steps, eval_steps=config.eval_steps,
        eval_interval=config.eval_interval)
    if output is None:  # resumed at train_steps: nothing trained, evaluate
      output = controller.evaluate(steps=config.eval_steps)
    results = _to_python(output)
    if _is_chief(strategy):
      with tf.io.gfile.GFile(os.path.join(model_dir, "eval_results.json"),
                             "w") as f:
        json.dump({"step": int(global_step.numpy()), **results}, f, indent=2)
  if write_dir != model_dir:
    tf.io.gfile.rmtree(write_dir)
  results["global_step"] = int(global_step.numpy())
  return results
