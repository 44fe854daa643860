"""EtcTrainer applies the task's optional `train_features` hook: to every
training batch, before the forward pass, with the optimizer's step."""

import numpy as np
import tensorflow as tf
import tf_keras

from etc_realformer.training import optimization
from etc_realformer.training import trainer as trainer_lib


class _ZeroInputTask:
  """Zeroes `x` in training batches and records the step it was given."""

  def __init__(self):
    self.calls = tf.Variable(0, dtype=tf.int64)
    self.last_step = tf.Variable(-1, dtype=tf.int64)

  def train_features(self, features, step):
    self.calls.assign_add(1)
    self.last_step.assign(tf.cast(step, tf.int64))
    return {**features, "x": tf.zeros_like(features["x"])}

  def per_example_loss(self, features, outputs):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=features["label"], logits=outputs["logits"])


class _ToyModel(tf_keras.Model):

  def __init__(self):
    super().__init__()
    self.hidden = tf_keras.layers.Dense(8, activation="tanh")
    self.out = tf_keras.layers.Dense(3)

  def call(self, features, training=None):
    return {"logits": self.out(self.hidden(features["x"]))}


def test_train_features_hook_sees_every_batch_and_the_step():
  rng = np.random.RandomState(0)
  data = {"x": rng.normal(size=(32, 4)).astype("float32"),
          "label": rng.randint(0, 3, size=32).astype("int32")}
  model = _ToyModel()
  model({"x": data["x"][:1]})
  kernel_before = model.hidden.kernel.numpy().copy()
  bias_before = model.out.bias.numpy().copy()
  optimizer = optimization.build_optimizer(
      train_steps=10, learning_rate=0.1, warmup_steps=0,
      weight_decay_rate=0.0)
  strategy = tf.distribute.get_strategy()
  dataset = tf.data.Dataset.from_tensor_slices(data).batch(4).repeat()
  task = _ZeroInputTask()
  trainer = trainer_lib.EtcTrainer(task, model, optimizer, strategy, dataset,
                                   grad_accum_steps=2)
  trainer.train(tf.constant(3))
  assert int(optimizer.iterations.numpy()) == 3
  assert int(task.calls.numpy()) == 6  # 3 steps x 2 micro-batches
  assert int(task.last_step.numpy()) == 2  # the step being taken
  # With zero inputs the first kernel gets no gradient; the rest trains.
  np.testing.assert_array_equal(model.hidden.kernel.numpy(), kernel_before)
  assert not np.allclose(model.out.bias.numpy(), bias_before)
