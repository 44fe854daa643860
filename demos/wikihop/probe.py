r"""Learnability probe for the WikiHop demo: which reasoning paths train.

  python -m demos.wikihop.probe --data_dir=DIR [--steps=800 --layers=3
      --init=0.05 --lr=1e-3 --batch_size=16 --diagnostic=none]

Trains the demo's tiny ETC-RealFormer (`demos.wikihop.demo.demo_gin`, same
features, same task head and loss) with a plain XLA-compiled Adam loop, and
prints train loss and dev accuracy every `--every` steps. DIR holds the
output of `demos.wikihop.synthetic.write_dataset` featurized at the demo's
lengths (`--make_data` writes it: the demo's `--num_train`, and `--hops`).

`--diagnostic` swaps the task for a control that needs a known number of
attention steps in ETC's WikiHop layout (candidate global tokens read their
linked mentions; everything else is as in training):

* `none`: the real task (hops=1 needs the query village's sentence found and
  its country read: >= 3 composed attention steps; hops=2 more).
* `smallest_candidate`: label = the candidate with the smallest wordpiece id
  (1 step: the candidate reads its own wordpieces).
* `smallest_village`: label = the candidate whose document sentence starts
  with the smallest wordpiece id (2 steps: l2l to the mention, g2l to the
  candidate).
* `marked_query_mentions`: the real label, but every document mention of the
  query's last wordpiece is replaced by a special id, so the query match is
  in the input (2 steps for hops=1).

* `marked_chain` (hops=2 data): the real label, with the query village's
  document mention and both document mentions of the bridge city (the city
  in the village's sentence) replaced by one special id, so both content
  matches are in the input (2 steps: l2l to the candidate's mention, g2l).

`--mark_fade_steps=N` (with `marked_query_mentions` or `marked_chain`) makes
the marks a curriculum instead of a control: every training example is
marked for the first `--mark_hold_steps`, then each is marked with a
probability that falls linearly to 0 over N steps, after which training goes
on unmarked; dev accuracy is always measured on the unmarked (real) task.
With `marked_chain` the village marks follow that schedule and the bridge
marks their own (`--bridge_hold_steps`, `--bridge_fade_steps`), so the
bridge can be faded first, down to `--bridge_floor` (the fraction of
examples that stay marked to the end).

`--keep_village_marks` (with `marked_chain`): the village stays marked in
training and in dev (as the featurizer's `mark_query_subject` does in the
product), so only the bridge is a curriculum and dev measures the chain
with the village given. `--marking=type` marks by token type 2 (the
featurizer option's) instead of replacing the token by the mark id.

Why a tool: the demo's dev accuracy sat at chance for a long time, and this is
how the cause was narrowed down (docs/wikihop_demo.md, "The learnability
probe"); it is not a benchmark and not a test.
"""

import os
import time
from typing import Dict, Optional

from absl import flags
import gin
import numpy as np
import tensorflow as tf
import tf_keras

from demos.wikihop import demo
from demos.wikihop import scaffold
from etc_realformer import cli

# Defines --gin_file / --gin_bindings (extra bindings apply after the
# demo's).
from tasks import run
from tasks.common.command_line import preprocess_flags
from tasks.wikihop import features as wikihop_features
from tasks.wikihop import task as wikihop_task

FLAGS = flags.FLAGS

# Token type ids of `tasks.wikihop.features`.
_DOC = wikihop_features.SENTENCE_TOKEN_TYPE_ID
_QUERY = wikihop_features.QUESTION_TOKEN_TYPE_ID
_CANDIDATE = wikihop_features.CANDIDATE_TOKEN_TYPE_ID
# How the controls mark a mention: its token replaced by MARK_ID, or its token
# type set to MARK_TYPE (the featurizer's typed subject).
MARK_ID = 6  # [unused5] in the synthetic vocabulary: free.
MARK_TYPE = wikihop_features.QUERY_SUBJECT_TOKEN_TYPE_ID
PERIOD_ID = 15  # "." in the synthetic vocabulary: ends every fact sentence.


def _query_village_mentions(seg: tf.Tensor, tok: tf.Tensor) -> tf.Tensor:
  """<bool>[B, L]: document tokens equal to the query's last wordpiece (the
  village: `country_of <village>`)."""
  last_query = tf.reduce_max(
      tf.where(tf.equal(seg, _QUERY), tf.range(tf.shape(seg)[1])[None], -1),
      axis=1)
  village = tf.gather(tok, last_query, batch_dims=1)
  return tf.logical_and(tf.equal(seg, _DOC), tf.equal(tok, village[:, None]))


def _bridge_city_mentions(seg: tf.Tensor, tok: tf.Tensor, sid: tf.Tensor,
                          village: tf.Tensor) -> tf.Tensor:
  """<bool>[B, L]: document mentions of the bridge city (the name just before
  the period of the query village's sentence), as the demo's scaffold finds
  them once the village is typed."""
  typed = tf.where(village, wikihop_features.QUERY_SUBJECT_TOKEN_TYPE_ID, seg)
  return scaffold.bridge_mentions(tok, typed, sid, PERIOD_ID)


def _keep_marks(mark: tf.Tensor, prob: Optional[tf.Tensor]) -> tf.Tensor:
  """`mark` for a random fraction `prob` of the examples (all if None)."""
  if prob is None:
    return mark
  chosen = tf.random.uniform([tf.shape(mark)[0], 1]) < prob
  return tf.logical_and(mark, chosen)


def diagnostic_batch(batch: Dict, kind: str,
                     mark_prob: Optional[tf.Tensor] = None,
                     bridge_mark_prob: Optional[tf.Tensor] = None,
                     marking: str = "token") -> Dict:
  """The batch with the control's label or input (see the docstring).

  `mark_prob` (marked_query_mentions, marked_chain): the probability that an
  example's village mentions are marked (default: all are);
  `bridge_mark_prob` (marked_chain): the same for its bridge mentions;
  `marking`: "token" (replace by the mark id) or "type" (token type 2).
  """
  if kind == "none":
    return batch
  batch = dict(batch)
  seg, tok = batch["segment_ids"], batch["token_ids"]
  sid, linked = batch["long_sentence_ids"], batch["l2g_linked_ids"]
  big = tf.constant(10**6, tok.dtype)
  if kind == "smallest_candidate":
    pos = tf.argmin(tf.where(tf.equal(seg, _CANDIDATE), tok, big), axis=1,
                    output_type=tf.int32)
    batch["label"] = tf.gather(sid, pos, batch_dims=1)
  elif kind == "smallest_village":
    num_global = tf.shape(batch["global_token_ids"])[1]
    batch_size = tf.shape(sid)[0]
    prev = tf.concat([tf.fill([batch_size, 1], -2), sid[:, :-1]], 1)
    first = tf.logical_and(tf.equal(seg, _DOC), tf.not_equal(sid, prev))
    flat_ids = tf.maximum(sid, 0) + num_global * tf.range(batch_size)[:, None]
    first_token = tf.reshape(tf.math.unsorted_segment_max(
        tf.where(first, tok, -1), flat_ids, num_global * batch_size),
                             [-1, num_global])
    village = tf.gather(first_token, tf.maximum(sid, 0), batch_dims=1)
    mention = tf.logical_and(tf.equal(seg, _DOC), linked >= 0)
    pos = tf.argmin(tf.where(mention, village, big), axis=1,
                    output_type=tf.int32)
    batch["label"] = tf.gather(linked, pos, batch_dims=1)
  elif kind in ("marked_query_mentions", "marked_chain"):
    village = _query_village_mentions(seg, tok)
    mark = _keep_marks(village, mark_prob)
    if kind == "marked_chain":
      bridge = _bridge_city_mentions(seg, tok, sid, village)
      mark = tf.logical_or(mark, _keep_marks(bridge, bridge_mark_prob))
    if marking == "type":
      batch["segment_ids"] = tf.where(mark, MARK_TYPE, seg)
    else:
      batch["token_ids"] = tf.where(mark, MARK_ID, tok)
  return batch


def define_flags() -> None:
  """The binary's flags (not at import: the demos define flags of the same
  names, e.g. --num_train)."""
  flags.DEFINE_integer("num_train", 6000, "With --make_data: train size.")
  flags.DEFINE_string("data_dir", None, "Featurized synthetic data.")
  flags.DEFINE_bool("make_data", False, "Write the data first.")
  flags.DEFINE_integer("hops", 1, "With --make_data: 1, 2 or 3.")
  flags.DEFINE_integer("steps", 800, "Optimizer steps.")
  flags.DEFINE_integer("every", 100, "Report interval.")
  flags.DEFINE_integer("layers", 3, "Encoder layers.")
  flags.DEFINE_integer("hidden", 64, "Hidden size (intermediate 2x).")
  flags.DEFINE_integer("heads", 4, "Attention heads.")
  flags.DEFINE_float("init", 0.05, "initializer_range.")
  flags.DEFINE_float("lr", 1e-3, "Adam learning rate (linear decay to 0).")
  flags.DEFINE_integer("batch_size", 16, "Training batch size.")
  flags.DEFINE_enum("diagnostic", "none",
                    ["none", "smallest_candidate", "smallest_village",
                     "marked_query_mentions", "marked_chain"],
                    "See the module docstring.")
  flags.DEFINE_integer(
      "mark_fade_steps", 0, "With marked_query_mentions or marked_chain: > 0 "
      "fades the (village) marks out over this many steps (a curriculum; dev "
      "is then unmarked).")
  flags.DEFINE_integer("mark_hold_steps", 300,
                       "Steps with every example marked before the fade.")
  flags.DEFINE_integer("bridge_hold_steps", 300,
                       "marked_chain: steps before the bridge marks fade.")
  flags.DEFINE_integer("bridge_fade_steps", 0,
                       "marked_chain: > 0 fades the bridge marks over this "
                       "many steps (0: as the village marks).")
  flags.DEFINE_float("bridge_floor", 0.0,
                     "marked_chain: the bridge marks fade down to this "
                     "fraction of the examples, not to 0.")
  flags.DEFINE_bool("keep_village_marks", False,
                    "marked_chain: the village stays marked, in dev too.")
  flags.DEFINE_enum("marking", "token", ["token", "type"],
                    "How a mention is marked: its token replaced by the mark "
                    "id, or its token type set to 2.")


def main(argv):
  del argv
  preprocess_flags.require_flags(("data_dir",))
  data_dir = os.path.abspath(FLAGS.data_dir)
  if FLAGS.make_data:
    # The demo's data at other hops: 300 dev records, seed 0, nothing typed.
    demo.make_data(data_dir, FLAGS.num_train, 300, 0, hops=FLAGS.hops)
  gin_path = os.path.join(data_dir, "probe.gin")
  with open(gin_path, "w") as f:
    f.write(demo.demo_gin(data_dir, FLAGS.steps, 0))
  run.register_tasks()
  gin.clear_config()
  run.parse_gin([gin_path], [
      "WikiHopTask.side_inputs_in_pipeline = True",
      f"etc_config.initializer_range = {FLAGS.init}",
      f"etc_config.num_hidden_layers = {FLAGS.layers}",
      f"etc_config.hidden_size = {FLAGS.hidden}",
      f"etc_config.intermediate_size = {2 * FLAGS.hidden}",
      f"etc_config.num_attention_heads = {FLAGS.heads}",
      *FLAGS.gin_bindings])  # --gin_bindings: defined by tasks.run
  task = wikihop_task.WikiHopTask()
  numeric = lambda b: {k: v for k, v in b.items() if v.dtype != tf.string}
  train = iter(task.build_inputs("train", FLAGS.batch_size))
  dev = numeric(next(iter(task.build_inputs("eval", 300))))
  model = task.build_model()
  model(numeric(next(train)))
  optimizer = tf_keras.optimizers.Adam(
      tf_keras.optimizers.schedules.PolynomialDecay(FLAGS.lr, FLAGS.steps,
                                                    0.0))

  chain = FLAGS.diagnostic == "marked_chain"
  curriculum = (FLAGS.diagnostic in ("marked_query_mentions",
                                     "marked_chain") and
                (FLAGS.mark_fade_steps > 0 or
                 (chain and FLAGS.keep_village_marks)))
  mark_prob = tf.Variable(1.0, trainable=False)
  bridge_mark_prob = tf.Variable(1.0, trainable=False)

  def fade_at(i: int, hold: int, fade: int) -> float:
    return float(np.clip(1.0 - (i - hold) / max(1, fade), 0.0, 1.0))

  def mark_prob_at(i: int) -> float:
    return fade_at(i, FLAGS.mark_hold_steps, FLAGS.mark_fade_steps)

  def bridge_mark_prob_at(i: int) -> float:
    if not FLAGS.bridge_fade_steps:
      return mark_prob_at(i)
    return max(FLAGS.bridge_floor,
               fade_at(i, FLAGS.bridge_hold_steps, FLAGS.bridge_fade_steps))

  keep_village = chain and FLAGS.keep_village_marks

  @tf.function(jit_compile=True)
  def step(batch):
    batch = diagnostic_batch(
        batch, FLAGS.diagnostic,
        mark_prob if curriculum and not keep_village else None,
        bridge_mark_prob if curriculum and chain else None, FLAGS.marking)
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(task.per_example_loss(
          batch, model(batch, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    grads, _ = tf.clip_by_global_norm(grads, 1.0)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  @tf.function(jit_compile=True)
  def accuracy(batch):
    if keep_village:  # the village as given; the bridge never marked
      batch = diagnostic_batch(batch, FLAGS.diagnostic, None,
                               tf.constant(0.0), FLAGS.marking)
    elif not curriculum:
      batch = diagnostic_batch(batch, FLAGS.diagnostic,
                               marking=FLAGS.marking)
    prediction = model(batch, training=False)["prediction"]
    return tf.reduce_mean(tf.cast(tf.equal(prediction, batch["label"]),
                                  tf.float32))

  start, losses = time.time(), []
  for i in range(1, FLAGS.steps + 1):
    if curriculum:
      mark_prob.assign(mark_prob_at(i))
      bridge_mark_prob.assign(bridge_mark_prob_at(i))
    losses.append(float(step(numeric(next(train)))))
    if i % FLAGS.every == 0:
      print(f"probe | {FLAGS.diagnostic} | step {i} | train loss "
            f"{np.mean(losses[-FLAGS.every:]):.3f} | dev accuracy "
            f"{float(accuracy(dev)):.3f} | "
            + (f"marked {1.0 if keep_village else mark_prob_at(i):.2f} | "
               if curriculum else "")
            + (f"bridge marked {bridge_mark_prob_at(i):.2f} | "
               if curriculum and chain else "")
            + f"{time.time() - start:.0f} s",
            flush=True)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
