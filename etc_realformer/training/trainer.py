"""The train/eval/predict steps, on top of orbit.

Why orbit: `orbit.Controller` already gives what the runner needs around the
steps -- restoring the latest checkpoint on start (so a killed run resumes
with the same command), saving every N steps through a
`tf.train.CheckpointManager`, the steps/s timer, TensorBoard summaries of
whatever the loops return, and train-and-evaluate interleaving. What it lacks
is written here: the replica step (gradient accumulation, loss scaling for
float16, optional XLA), the progress line with an ETA (an orbit train
action), the history of the loops' and evaluations' outputs as JSON lines
(an orbit action, for tools to read instead of the console), and a predict
loop that gathers per-example outputs.
"""

import json
import math
import time
from typing import Any, Dict, List, Optional

import numpy as np
import orbit
import tensorflow as tf
import tf_keras

from etc_realformer.training import optimization


def _is_loss_scale_optimizer(optimizer) -> bool:
  return isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer)


class EtcTrainer(orbit.StandardTrainer):
  """One optimizer step per `train_step`, over `grad_accum_steps` batches.

  The task supplies `per_example_loss(features, outputs)` (float32 [B]); the
  step loss is its sum divided by the global batch (all replicas, all
  accumulated micro-batches), so the gradient is the same whatever the number
  of replicas or accumulation steps for the same global batch.
  """

  def __init__(self, task, model: tf_keras.Model,
               optimizer: tf_keras.optimizers.legacy.Optimizer,
               strategy: tf.distribute.Strategy,
               train_dataset, grad_accum_steps: int = 1,
               jit_compile: bool = False):
    if grad_accum_steps < 1:
      raise ValueError(f"grad_accum_steps must be >= 1, got "
                       f"{grad_accum_steps}")
    self.task = task
    self.model = model
    self.optimizer = optimizer
    self.strategy = strategy
    self.grad_accum_steps = grad_accum_steps
    with strategy.scope():
      self.train_loss = tf_keras.metrics.Mean("loss", dtype=tf.float32)
    # XLA compiles the forward/backward computation only: the optimizer
    # update contains cross-replica merge calls, which XLA cannot hold.
    self._compute = tf.function(self._compute_gradients,
                                jit_compile=jit_compile, autograph=False)
    super().__init__(
        train_dataset,
        options=orbit.StandardTrainerOptions(use_tf_while_loop=True))

  def _compute_gradients(self, features):
    with tf.GradientTape() as tape:
      outputs = self.model(features, training=True)
      per_example = tf.cast(
          self.task.per_example_loss(features, outputs), tf.float32)
      # Averages over the global batch (all replicas) of this micro-batch.
      loss = tf.nn.compute_average_loss(per_example) / self.grad_accum_steps
      scaled = (self.optimizer.get_scaled_loss(loss)
                if _is_loss_scale_optimizer(self.optimizer) else loss)
    variables = self.model.trainable_variables
    grads = tape.gradient(scaled, variables)
    if _is_loss_scale_optimizer(self.optimizer):
      grads = self.optimizer.get_unscaled_gradients(grads)
    return per_example, grads

  def _replica_step(self, batches):
    variables = self.model.trainable_variables
    total = None
    for features in batches:
      # Strings (ids, candidate texts) are for predictions only; XLA cannot
      # take them as arguments.
      features = {k: v for k, v in features.items() if v.dtype != tf.string}
      per_example, grads = self._compute(features)
      grads = [tf.convert_to_tensor(g) if g is not None else None
               for g in grads]
      if total is None:
        total = grads
      else:
        total = [a + b if b is not None else a for a, b in zip(total, grads)]
      self.train_loss.update_state(per_example)
    self.optimizer.apply_gradients(
        [(g, v) for g, v in zip(total, variables) if g is not None])

  def train_loop_begin(self):
    self.train_loss.reset_states()

  # Traced without AutoGraph (orbit's loop around it keeps it): the step is
  # straight-line code, and converting it and everything it calls costs
  # seconds of every process's first step.
  @tf.autograph.experimental.do_not_convert
  def train_step(self, iterator):
    batches = [next(iterator) for _ in range(self.grad_accum_steps)]
    self.strategy.run(self._replica_step, args=(batches,))

  def train_loop_end(self) -> Dict[str, tf.Tensor]:
    return {"loss": self.train_loss.result(),
            "learning_rate": optimization.current_learning_rate(
                self.optimizer)}


class EtcEvaluator(orbit.StandardEvaluator):
  """Mean loss and the task's metrics over the eval set."""

  def __init__(self, task, model: tf_keras.Model,
               strategy: tf.distribute.Strategy, eval_dataset):
    self.task = task
    self.model = model
    self.strategy = strategy
    with strategy.scope():
      self.eval_loss = tf_keras.metrics.Mean("loss", dtype=tf.float32)
      self.metrics = task.build_metrics()
    super().__init__(
        eval_dataset,
        options=orbit.StandardEvaluatorOptions(use_tf_while_loop=False))

  def eval_begin(self):
    self.eval_loss.reset_states()
    for m in self.metrics:
      m.reset_states()

  @tf.autograph.experimental.do_not_convert  # as train_step
  def eval_step(self, iterator):
    def step(features):
      outputs = self.model(features, training=False)
      self.eval_loss.update_state(
          tf.cast(self.task.per_example_loss(features, outputs), tf.float32))
      self.task.update_metrics(self.metrics, features, outputs)
    self.strategy.run(step, args=(next(iterator),))

  def eval_end(self) -> Dict[str, tf.Tensor]:
    results = {"loss": self.eval_loss.result()}
    for m in self.metrics:
      results[m.name] = m.result()
    return results


class ProgressAction:
  """orbit train action: one line with step, loss, steps/s and ETA."""

  def __init__(self, global_step: tf.Variable, total_steps: int):
    self.global_step = global_step
    self.total_steps = total_steps
    self.start()

  def start(self) -> None:
    """Counts from now and the current step: call it once the run has
    restored its checkpoint, so that a resumed run's first rate counts
    only the steps it ran itself."""
    self._last_step = int(self.global_step.numpy())
    self._last_time = time.time()

  def __call__(self, output: Dict[str, Any]) -> None:
    step = int(self.global_step.numpy())
    now = time.time()
    # The first line's rate includes the first loop's tracing and
    # compilation: an honest average since the start.
    ran = step - self._last_step
    rate = ran / max(now - self._last_time, 1e-9) if ran > 0 else 0.0
    self._last_step, self._last_time = step, now
    remaining = max(self.total_steps - step, 0)
    if rate > 0:
      eta = time.strftime("%H:%M:%S", time.gmtime(remaining / rate))
    else:
      eta = "?"
    loss = float(np.asarray(orbit.utils.get_value(output.get("loss", np.nan))))
    # Printed once (not also logged): the progress line is for the console.
    print(f"progress | step {step}/{self.total_steps} | loss {loss:.4f} | "
          f"{rate:.2f} steps/s | ETA {eta}", flush=True)


class HistoryAction:
  """orbit action: appends one JSON line per call to `path`.

  Each line is {"step": the global step, "metrics": {name: value}}, from
  the output of a training loop (train action) or of an evaluation (eval
  action). A value that is not finite is written as null, so every line is
  strict JSON. Appended, so that a resumed run continues its history
  (`truncate_history` first drops the lines after the restored step).
  """

  def __init__(self, global_step: tf.Variable, path: Optional[str]):
    """`path`: the JSON-lines file; None writes nothing (a worker that is
    not the chief)."""
    self.global_step = global_step
    self.path = path

  def __call__(self, output: Dict[str, Any]) -> None:
    if self.path is None:
      return
    metrics = {}
    for name, value in sorted(output.items()):
      value = np.asarray(orbit.utils.get_value(value))
      if value.size != 1:  # a history holds scalars only
        continue
      value = float(value.reshape(()))
      metrics[name] = value if math.isfinite(value) else None
    step = int(self.global_step.numpy())
    line = json.dumps({"step": step, "metrics": metrics}, sort_keys=True)
    try:
      with tf.io.gfile.GFile(self.path, "a") as f:
        f.write(line + "\n")
    except tf.errors.OpError as e:  # a full disk's says nothing of the path
      raise OSError(f"{self.path}: cannot append the history line of step "
                    f"{step} ({e.message or type(e).__name__})") from e


def truncate_history(path: str, step: int) -> int:
  """Drops the lines of a `HistoryAction` file after `step` (and a
  half-written last line): what a killed run logged after its last
  checkpoint, which the resumed run, restored at `step`, trains again.
  Rewritten whole and renamed over the file, so that a kill meanwhile
  leaves the old file or the new one. Returns the number of lines dropped.
  """
  if not tf.io.gfile.exists(path):
    return 0
  with tf.io.gfile.GFile(path, "r") as f:
    lines = f.read().splitlines()
  kept = []
  for line in lines:
    try:
      if int(json.loads(line)["step"]) <= step:
        kept.append(line)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
      continue
  if len(kept) == len(lines):
    return 0
  temporary = path + ".tmp"
  with tf.io.gfile.GFile(temporary, "w") as f:
    f.write("".join(line + "\n" for line in kept))
  tf.io.gfile.rename(temporary, path, overwrite=True)
  return len(lines) - len(kept)


def read_history(path: str) -> List[Dict[str, Any]]:
  """The lines of a `HistoryAction` file in step order, the last one per
  step (a history written before `truncate_history` may repeat steps); a
  half-written last line (a killed run) is skipped. No file: []."""
  if not tf.io.gfile.exists(path):
    return []
  by_step: Dict[int, Dict[str, Any]] = {}
  with tf.io.gfile.GFile(path, "r") as f:
    for line in f:
      try:
        record = json.loads(line)
      except json.JSONDecodeError:
        continue
      by_step[int(record["step"])] = record
  return [by_step[step] for step in sorted(by_step)]


def predict(task, model: tf_keras.Model, strategy: tf.distribute.Strategy,
            dataset) -> Dict[str, np.ndarray]:
  """Runs the model over a (distributed) dataset; per-example outputs.

  Returns:
    name -> NumPy array concatenated over all examples (and replicas) of
    `task.prediction_outputs`.
  """
  @tf.function(autograph=False)  # straight-line code, as train_step
  def step(features):
    def replica_fn(f):
      return task.prediction_outputs(f, model(f, training=False))
    return strategy.run(replica_fn, args=(features,))

  gathered: Dict[str, List[np.ndarray]] = {}
  for features in dataset:
    outputs = step(features)
    for name, value in outputs.items():
      for local in strategy.experimental_local_results(value):
        gathered.setdefault(name, []).append(local.numpy())
  if not gathered:
    raise ValueError("the predict input is empty")
  return {k: np.concatenate(v, axis=0) for k, v in gathered.items()}
