"""`EtcTrainer`: the same numbers on one device, on a 2-replica mirror and
with gradient accumulation; string features dropped; one progress line;
the history lines.

The check runs in a child process (this file run as a script) because the
two logical CPU devices must be configured before TensorFlow starts. It
trains a small stand-in Keras model (defined here, not library code) with the
real `EtcTrainer` + `build_optimizer` for three steps of global batch 8:

* default strategy, batch 8;
* MirroredStrategy over 2 logical CPUs, 4 per replica;
* default strategy, 2 accumulated micro-batches of 4;

and compares losses and final weights. Clipping is active (clip_norm small)
so that clipping after the cross-replica sum is checked too.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def _child() -> None:
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top

  from etc_realformer.training import distribution  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import optimization  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top

  distribution.split_cpu(2)

  class ToyTask:
    """Stand-in task: 5-way classification with a per-example loss."""

    def per_example_loss(self, features, outputs):
      return tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=features["label"], logits=outputs["logits"])

  class ToyModel(tf_keras.Model):

    def __init__(self):
      super().__init__()
      self.hidden = tf_keras.layers.Dense(16, activation="tanh")
      self.norm = tf_keras.layers.LayerNormalization()
      self.out = tf_keras.layers.Dense(5)

    def call(self, features, training=None):
      return {"logits": self.out(self.norm(self.hidden(features["x"])))}

  rng = np.random.RandomState(0)
  data = {"x": rng.normal(size=(64, 6)).astype("float32"),
          "label": rng.randint(0, 5, size=64).astype("int32")}
  tf_keras.utils.set_random_seed(0)
  reference = ToyModel()
  reference({"x": data["x"][:1]})
  init_weights = reference.get_weights()

  def train(strategy, grad_accum_steps):
    micro_batch = 8 // grad_accum_steps
    with strategy.scope():
      model = ToyModel()
      model({"x": data["x"][:1]})
      model.set_weights(init_weights)
      optimizer = optimization.build_optimizer(
          train_steps=10, learning_rate=0.05, warmup_steps=0,
          weight_decay_rate=0.01, clip_norm=0.5)
    dataset = strategy.distribute_datasets_from_function(
        lambda ctx: tf.data.Dataset.from_tensor_slices(data).batch(
            ctx.get_per_replica_batch_size(micro_batch)).repeat())
    trainer = trainer_lib.EtcTrainer(ToyTask(), model, optimizer, strategy,
                                     dataset,
                                     grad_accum_steps=grad_accum_steps)
    losses = []
    for _ in range(3):
      out = trainer.train(tf.constant(1))
      losses.append(float(out["loss"]))
    return {"losses": losses, "steps": int(optimizer.iterations.numpy()),
            "weights": [w.tolist() for w in model.get_weights()],
            "replicas": strategy.num_replicas_in_sync}

  cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
  results = {
      "one": train(tf.distribute.get_strategy(), 1),
      "mirrored": train(tf.distribute.MirroredStrategy(cpus), 1),
      "accumulated": train(tf.distribute.get_strategy(), 2),
  }
  print("RESULT " + json.dumps(results))


def test_mirrored_and_accumulated_match_one_device():
  env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2",
             CUDA_VISIBLE_DEVICES="")
  proc = subprocess.run([sys.executable, os.path.abspath(__file__)],
                        env=env, capture_output=True, text=True, timeout=180)
  assert proc.returncode == 0, proc.stderr[-4000:]
  results = json.loads(proc.stdout.split("RESULT ", 1)[1])
  one = results["one"]
  assert results["mirrored"]["replicas"] == 2
  assert one["steps"] == 3
  # The loss changes over the steps (the optimizer moved the weights)...
  assert one["losses"][0] != pytest.approx(one["losses"][2], abs=1e-3)
  for name in ("mirrored", "accumulated"):
    other = results[name]
    assert other["steps"] == 3
    # ...and identically on 2 replicas and with 2 accumulated micro-batches.
    assert other["losses"] == pytest.approx(one["losses"], abs=1e-5), name
    for a, b in zip(one["weights"], other["weights"]):
      np.testing.assert_allclose(np.array(b), np.array(a), atol=1e-5,
                                 err_msg=name)


def test_string_features_are_dropped_before_the_step():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import optimization  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top

  class Task:
    seen = []

    def per_example_loss(self, features, outputs):
      self.seen.append(sorted(features))
      return tf.reduce_sum(tf.square(outputs), -1)

  model = tf_keras.Sequential([tf_keras.layers.Dense(2)])
  model.build([None, 3])
  wrapped = tf_keras.Model  # the trainer calls model(features)

  class Model(wrapped):

    def __init__(self):
      super().__init__()
      self.inner = model

    def call(self, features, training=None):
      return self.inner(features["x"])

  data = {"x": np.ones([8, 3], np.float32),
          "id": np.array([b"a"] * 8)}
  dataset = tf.data.Dataset.from_tensor_slices(data).batch(4).repeat()
  optimizer = optimization.build_optimizer(train_steps=4, learning_rate=0.1,
                                           warmup_steps=0)
  task = Task()
  trainer = trainer_lib.EtcTrainer(task, Model(), optimizer,
                                   tf.distribute.get_strategy(), dataset)
  trainer.train(tf.constant(2))
  assert int(optimizer.iterations.numpy()) == 2
  assert task.seen and all(names == ["x"] for names in task.seen)


def test_progress_line_is_printed_once(capsys):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  step = tf.Variable(0, dtype=tf.int64)
  action = trainer_lib.ProgressAction(step, total_steps=10)
  step.assign(5)
  action({"loss": np.float32(0.5)})
  out, err = capsys.readouterr()
  assert out.count("progress | step 5/10 | loss 0.5000") == 1
  assert "progress" not in err
  # The first line has a rate (since the start) and an ETA, never nan.
  assert "nan" not in out and "ETA ?" not in out, out


def test_progress_after_a_restore_counts_only_the_steps_run():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  step = tf.Variable(0, dtype=tf.int64)
  action = trainer_lib.ProgressAction(step, total_steps=1000)
  step.assign(900)  # restored
  action.start()
  assert action._last_step == 900  # pylint: disable=protected-access


def test_history_lines_are_strict_json_read_back_last_per_step(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / "history.jsonl")
  step = tf.Variable(2, dtype=tf.int64)
  action = trainer_lib.HistoryAction(step, path)
  action({"loss": np.float32(0.5), "accuracy": tf.constant(0.25)})
  step.assign(4)
  action({"loss": np.float32(np.nan), "vector": np.zeros(3)})
  action({"loss": np.float32(0.75)})  # step 4 again (a resumed run)
  with open(path) as f:
    lines = f.read().splitlines()
  # null, not NaN: strict JSON; non-scalars are left out.
  assert lines[1] == '{"metrics": {"loss": null}, "step": 4}'
  with open(path, "a") as f:
    f.write('{"metrics": {"lo')  # a killed run's half-written line
  assert trainer_lib.read_history(path) == [
      {"step": 2, "metrics": {"accuracy": 0.25, "loss": 0.5}},
      {"step": 4, "metrics": {"loss": 0.75}}]
  assert trainer_lib.read_history(str(tmp_path / "none.jsonl")) == []
  trainer_lib.HistoryAction(step, None)({"loss": 1.0})  # writes nothing


def test_truncate_history_keeps_the_lines_up_to_the_restored_step(tmp_path):
  from etc_realformer.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  path = tmp_path / "history.jsonl"
  lines = [json.dumps({"step": s, "metrics": {"loss": 1.0 / s}})
           for s in (10, 20, 30, 40)]
  # A killed run's lines after its checkpoint at 20, and a half line.
  path.write_text("\n".join(lines) + '\n{"metrics": {"lo')
  assert trainer_lib.truncate_history(str(path), 20) == 3
  assert path.read_text() == "\n".join(lines[:2]) + "\n"
  assert trainer_lib.truncate_history(str(path), 20) == 0
  assert trainer_lib.truncate_history(str(tmp_path / "none.jsonl"), 0) == 0
  assert not (tmp_path / "history.jsonl.tmp").exists()


def test_a_history_that_cannot_be_written_names_its_file():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from etc_realformer.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  if not os.path.exists("/dev/full"):
    pytest.skip("no /dev/full (a device that is always full)")
  action = trainer_lib.HistoryAction(tf.Variable(7), "/dev/full")
  with pytest.raises(OSError, match="^/dev/full: cannot append the history "
                     "line of step 7"):
    action({"loss": 1.0})


if __name__ == "__main__":
  _child()
