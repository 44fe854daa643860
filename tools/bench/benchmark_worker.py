"""One benchmark measurement, run in a process of its own.

    python -m tools.bench.benchmark_worker \
        --spec='{"run": {"kind": "encoder", ...}, "etc_config": {...},
        "execution": {...}}' --result=/tmp/result.json

Started by `tools.bench.benchmark` (one process per measurement, so that the
peak resident memory belongs to that measurement alone). `--spec` is a
`tools.bench.benchmark_spec.Spec` as JSON: the run's settings and the fields of
`EtcConfig` and `ExecutionConfig` (the rest are their defaults). It imports
TensorFlow, builds the model and inputs, runs the step inside `tf.function`
(optionally `jit_compile`), warms up, times `repeats` calls one by one, and
writes one JSON object to `--result`. Kinds of measurement:

* `encoder`: `EtcModel` forward (`training=False`) or forward+backward
  (`training=True`, config dropout, gradient of a scalar loss w.r.t. every
  trainable variable), on random ids and `make_global_local_side_inputs`
  side inputs.
* `matmul_floor`: the same step traced, and only its matrix products timed
  (each MatMul / BatchMatMul op of the graph on random inputs of its shapes):
  the time no encoder doing those products can go below on this machine.
* `finetune`: a WikiHop training step (encoder + head + loss + optimizer
  update) on WikiHop-shaped random features; throughput in examples/s.
* `pretrain`: a pre-training step (the `tasks.pretrain` model: encoder, MLM
  head, CPC head with its second encoder pass; 0.8/0.2 loss; LAMB update)
  on random documents masked by the task's own masking; examples/s and
  tokens/s. With `export_dir`, the step's gradient is also written as an
  XLA module, as `xla_export` writes the encoder's.
* `xla_export`: the encoder step traced with `jit_compile`, written as its
  XLA module, inputs and manifest (`tools.gpu.xla_export`) for
  `tools.gpu.xla_runner`.
"""

import argparse
import functools
import json
import math
import os
import resource
import sys
import time
from typing import Any, Dict, List, Optional

from tools.bench import matmul_floor
from tools.bench.benchmark_spec import Spec
from tools.bench.timing import time_calls
from tools.gpu import xla_export

# Quiet TF before it is imported; the parent reads our stderr on failure only.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GIB = float(1 << 30)


# ------------------------------------------------------------------ memory
def proc_status_kib(field: str) -> Optional[int]:
  """A `kB` field of /proc/self/status (VmRSS, VmHWM), or None off Linux."""
  try:
    with open("/proc/self/status", "r") as f:
      for line in f:
        if line.startswith(field + ":"):
          return int(line.split()[1])
  except OSError:
    pass
  return None


def rss_gib() -> Optional[float]:
  kib = proc_status_kib("VmRSS")
  return None if kib is None else kib * 1024 / GIB


def peak_rss_gib() -> Optional[float]:
  kib = proc_status_kib("VmHWM")
  return None if kib is None else kib * 1024 / GIB


def ru_maxrss_gib() -> float:
  # ru_maxrss is in KiB on Linux.
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB


# ------------------------------------------------------------------ inputs
def global_local_inputs(long_len: int, global_len: int, batch: int,
                        vocab_size: int, segment_vocab_size: int,
                        tokens_per_sentence: int, pad_fraction: float,
                        seed: int) -> Dict[str, Any]:
  """Random token/segment ids and breakpoints/sentence ids (NumPy).

  One example per row. Long token i belongs to sentence i //
  `tokens_per_sentence` (clipped to G - 1); the last `pad_fraction` of the
  long tokens (and the global tokens without a sentence) are padding.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(seed)
  real_long = max(1, long_len - int(round(long_len * pad_fraction)))
  real_global = min(global_len, -(-real_long // tokens_per_sentence))
  sentence_ids = np.minimum(np.arange(long_len) // tokens_per_sentence,
                            global_len - 1)
  long_bp = np.zeros([batch, long_len], np.int32)
  long_bp[:, real_long - 1] = 1
  global_bp = np.zeros([batch, global_len], np.int32)
  global_bp[:, real_global - 1] = 1
  token_ids = rng.randint(1, vocab_size, [batch, long_len]).astype(np.int32)
  token_ids[:, real_long:] = 0
  global_ids = rng.randint(1, vocab_size, [batch, global_len]).astype(np.int32)
  global_ids[:, real_global:] = 0
  return {
      "token_ids": token_ids,
      "global_token_ids": global_ids,
      "segment_ids": rng.randint(0, segment_vocab_size,
                                 [batch, long_len]).astype(np.int32),
      "global_segment_ids": rng.randint(0, segment_vocab_size,
                                        [batch, global_len]).astype(np.int32),
      "long_breakpoints": long_bp,
      "global_breakpoints": global_bp,
      "sentence_ids": np.tile(sentence_ids[None].astype(np.int32),
                              [batch, 1]),
  }


def wikihop_raw_features(long_len: int, global_len: int, batch: int,
                         vocab_size: int, seed: int,
                         num_candidates: int = 10, candidate_len: int = 3,
                         query_len: int = 12, sentences_per_doc: int = 8,
                         sentence_len: int = 16) -> Dict[str, Any]:
  """WikiHop features of random records, made by the task's featurizer.

  A record has `num_candidates` candidates of `candidate_len` words, a
  query of `query_len` words and as many documents of `sentences_per_doc`
  sentences of `sentence_len` words as fit both inputs whole (about 31
  documents, 4010 long and 301 global tokens at 4096/430). Every word is one
  wordpiece of a `vocab_size` vocabulary; about 2% of the document tokens
  are a mention of a random candidate (its words in a sentence).

  Returns:
    The model features [batch, L] / [batch, G] and `label` [batch] (NumPy),
    and the first record's numbers of real long and global tokens.
  """
  # pylint: disable=g-import-not-at-top
  import tempfile
  import numpy as np
  import tensorflow as tf
  from etc_realformer.features import feature_names
  from tasks.common.featurization import tokenization
  from tasks.wikihop import features as wikihop
  # pylint: enable=g-import-not-at-top
  rng = np.random.RandomState(seed)
  # BERT's special entries first: the featurizer's global token ids are
  # [unused0] .. [unused4].
  special = (["[PAD]"] + [f"[unused{i}]" for i in range(10)] +
             ["[UNK]", "[CLS]", "[SEP]", "[MASK]"])
  words = [f"w{i}" for i in range(vocab_size - len(special))]
  with tempfile.TemporaryDirectory() as tmp:
    vocab = os.path.join(tmp, "vocab.txt")
    tokenization.write_vocab(vocab, special + words)
    featurizer = wikihop.WikiHopFeaturizer(
        vocab_path=vocab, long_seq_len=long_len, global_seq_len=global_len)

  def text(n):
    return [words[i] for i in rng.randint(0, len(words), n)]

  num_docs = max(0, min(
      (long_len - num_candidates * candidate_len - query_len) //
      (sentences_per_doc * sentence_len),
      (global_len - num_candidates - query_len) // (1 + sentences_per_doc)))
  mention_rate = 0.02 * sentence_len / candidate_len  # per sentence
  records = []
  for _ in range(batch):
    candidates = [" ".join(text(candidate_len))
                  for _ in range(num_candidates)]
    sentences = []
    for _ in range(num_docs * sentences_per_doc):
      sentence = text(sentence_len)
      if rng.rand() < mention_rate:
        at = rng.randint(0, sentence_len - candidate_len + 1)
        sentence[at:at + candidate_len] = candidates[
            rng.randint(num_candidates)].split()
      sentences.append(" ".join(sentence))
    features, _ = featurizer.record_fn(
        tf.constant(" ".join(text(query_len))),
        tf.constant(candidates, tf.string), tf.constant(sentences, tf.string),
        tf.constant([sentences_per_doc] * num_docs, tf.int32),
        tf.constant(candidates[rng.randint(num_candidates)]), tf.constant(""))
    records.append(features)
  names = wikihop.MODEL_FEATURES + (wikihop.LABEL,)
  f = {k: np.stack([r[k].numpy() for r in records]) for k in names}
  # Every wordpiece and global token id is > 0 (0 is padding).
  f["real_long_tokens"] = int(np.count_nonzero(f[feature_names.TOKEN_IDS][0]))
  f["real_global_tokens"] = int(np.count_nonzero(
      f[feature_names.GLOBAL_TOKEN_IDS][0]))
  return f


# ------------------------------------------------------------------- timing
def _setup_tf(spec: Spec):
  """Imports TF, sets threads and the precision policy; returns (tf, keras)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  if spec.run.intra_op_threads:
    tf.config.threading.set_intra_op_parallelism_threads(
        spec.run.intra_op_threads)
  if spec.run.inter_op_threads:
    tf.config.threading.set_inter_op_parallelism_threads(
        spec.run.inter_op_threads)
  tf.random.set_seed(spec.run.seed)
  tf_keras.mixed_precision.set_global_policy(spec.run.dtype)
  return tf, tf_keras


def _model(spec: Spec):
  """(EtcConfig, ExecutionConfig) of a spec: its fields, the rest default."""
  from etc_realformer import EtcConfig, ExecutionConfig  # pylint: disable=g-import-not-at-top
  return EtcConfig(**spec.etc_config), ExecutionConfig(**spec.execution)


def reset_allocator_peak(tf) -> None:
  try:
    tf.config.experimental.reset_memory_stats("CPU:0")
  except (ValueError, RuntimeError, AttributeError):
    pass


def allocator_peak(tf) -> Dict[str, float]:
  """TensorFlow's CPU allocator peak since the last reset (tensors only:
  no graph, runtime or malloc slack), when this TF build reports it."""
  try:
    info = tf.config.experimental.get_memory_info("CPU:0")
  except (ValueError, RuntimeError, AttributeError):
    return {}
  return {"allocator_peak_gib": info["peak"] / 2**30}


# ------------------------------------------------------------------ encoder
def _encoder_step(spec: Spec, out: Dict[str, Any]):
  """Builds the encoder, its inputs and the step of `spec.run.pass_`.

  Returns:
    (tf, step_fn: the `tf.function` of one step, features).
  """
  t0 = time.perf_counter()
  tf, _ = _setup_tf(spec)
  out["rss_after_import_gib"] = rss_gib()
  from etc_realformer.features.side_inputs import make_global_local_side_inputs  # pylint: disable=g-import-not-at-top
  from etc_realformer.networks.etc_model import EtcModel  # pylint: disable=g-import-not-at-top

  cfg, execution = _model(spec)
  # What "auto" (or an explicit value) means at this length: 0 = one piece.
  out["chunk_len_used"] = execution.chunk_len_for(spec.run.long_len)
  model = EtcModel(cfg, execution)
  model.build()
  out["_model"] = model
  out["num_parameters"] = int(sum(v.shape.num_elements()
                                  for v in model.trainable_variables))
  # The baseline: TF imported + model built, before any input exists.
  out["baseline_rss_gib"] = rss_gib()
  out["import_and_build_s"] = time.perf_counter() - t0

  raw = global_local_inputs(spec.run.long_len, spec.run.global_len,
                            spec.run.batch_size, cfg.vocab_size,
                            cfg.segment_vocab_size,
                            spec.run.tokens_per_sentence,
                            spec.run.pad_fraction, spec.run.seed)
  side = make_global_local_side_inputs(
      raw["long_breakpoints"], raw["global_breakpoints"],
      raw["sentence_ids"], local_radius=cfg.local_radius,
      relative_pos_max_distance=cfg.relative_pos_max_distance)
  features = {k: tf.constant(raw[k]) for k in (
      "token_ids", "global_token_ids", "segment_ids", "global_segment_ids")}
  features.update({k: v for k, v in side.items() if v is not None})
  out["rss_after_inputs_gib"] = rss_gib()

  impl = execution.att_implementation
  variables = model.trainable_variables

  if spec.run.pass_ == "fwd":
    def fn(feats):
      long_out, global_out = model(feats, training=False,
                                   att_implementation=impl)
      # A scalar output keeps the whole graph live without copying [B, L, H]
      # back, and `.numpy()` on it waits for the device. Mean squares, not
      # sums: LayerNorm outputs sum to about zero, a value no check can use.
      return (tf.reduce_mean(tf.square(tf.cast(long_out, tf.float32))) +
              tf.reduce_mean(tf.square(tf.cast(global_out, tf.float32))))
  else:
    def fn(feats):
      with tf.GradientTape() as tape:
        long_out, global_out = model(feats, training=True,
                                     att_implementation=impl)
        loss = (tf.reduce_mean(tf.square(tf.cast(long_out, tf.float32))) +
                tf.reduce_mean(tf.square(tf.cast(global_out, tf.float32))))
      grads = tape.gradient(loss, variables)
      missing = [v.name for v, g in zip(variables, grads) if g is None]
      if missing:
        raise ValueError(f"no gradient for {missing}")
      # Returning the global norm keeps every gradient from being pruned.
      return loss + tf.linalg.global_norm(grads)

  return tf, tf.function(fn, jit_compile=spec.run.xla), features


def measure_encoder(spec: Spec) -> Dict[str, Any]:
  """Times the encoder forward or forward+backward; see the module doc."""
  out: Dict[str, Any] = {}
  tf, step_fn, features = _encoder_step(spec, out)
  out.pop("_model")

  def step():
    return float(step_fn(features).numpy())

  reset_allocator_peak(tf)
  out.update(time_calls(step, spec.run.warmup, spec.run.repeats))
  out.update(allocator_peak(tf))
  out["tokens_per_s"] = (spec.run.batch_size * spec.run.long_len /
                         out["median_s"])
  return out


# ------------------------------------------------------------- matmul floor
def measure_matmul_floor(spec: Spec) -> Dict[str, Any]:
  """Times the step's matrix products alone: a floor for any encoder that
  does the same products (the original ETC does: same widths, same blocked
  band), at this machine's matrix-product rate.

  The step is traced as in `measure_encoder`; every MatMul / BatchMatMul of
  its graph (forward, and backward for `fwd_bwd`) is run again, one op each,
  on random inputs of the same shapes, dtypes and transposes, in one
  `tf.function`, one after another (the step may overlap independent
  products; on a few cores that gains little). Products with the same
  signature share their inputs, so small ones may find them in cache: the
  floor errs low.
  """
  out: Dict[str, Any] = {}
  tf, step_fn, features = _encoder_step(spec, out)
  out.pop("_model")
  graph = step_fn.get_concrete_function(features).graph
  products, skipped = matmul_floor.matrix_products(graph)
  if not products:
    raise ValueError("the traced step has no matrix products")
  inputs = {}  # (shape, dtype) -> one random tensor
  for p in products:
    for shape in (p["a"], p["b"]):
      key = (tuple(shape), p["dtype"])
      if key not in inputs:
        inputs[key] = tf.cast(
            tf.random.stateless_uniform(shape, seed=[len(inputs), 0],
                                        minval=-1.0, maxval=1.0),
            p["dtype"])

  @tf.function
  def run_products():
    total = tf.zeros([], tf.float32)
    previous = []
    for p in products:
      # Each product waits for the one before: TF's common-subexpression
      # pass would otherwise merge products with equal inputs into one.
      with tf.control_dependencies(previous):
        y = tf.linalg.matmul(inputs[(tuple(p["a"]), p["dtype"])],
                             inputs[(tuple(p["b"]), p["dtype"])],
                             transpose_a=p["transpose_a"],
                             transpose_b=p["transpose_b"])
      previous = [y]
      # One element of each product keeps it from being pruned.
      total += tf.cast(tf.reshape(y, [-1])[0], tf.float32)
    return total

  def step():
    return float(run_products().numpy())

  out.update(time_calls(step, spec.run.warmup, spec.run.repeats))
  gflop = sum(p["gflop"] for p in products)
  by_dtype: Dict[str, float] = {}
  for p in products:
    by_dtype[p["dtype"]] = by_dtype.get(p["dtype"], 0.0) + p["gflop"]
  out.update({
      "matmul_count": len(products),
      "matmul_distinct_inputs": len(inputs),
      "matmul_gflop": gflop,
      "matmul_gflop_by_dtype": by_dtype,
      "matmul_gflop_per_s": gflop / out["median_s"],
      "matmul_skipped_ops": skipped,
  })
  return out


# ----------------------------------------------------------------- training
def _for_precision(tf_keras, spec: Spec, optimizer, name: str):
  """(optimizer, its name) with loss scaling under mixed_float16."""
  if spec.run.dtype == "mixed_float16":
    return (tf_keras.mixed_precision.LossScaleOptimizer(optimizer),
            name + " + LossScaleOptimizer")
  return optimizer, name


def _training_setup(spec: Spec, make_task,
                    optimizer_settings: Dict[str, Any], optimizer_name: str,
                    **task_settings):
  """Sets TF up and builds the task, its model and the optimizer of the
  training modes.

  Args:
    spec: the measurement.
    make_task: keyword arguments -> the task (imports it once TF is set up).
    optimizer_settings: `build_optimizer` arguments besides the steps.
    optimizer_name: how the record names them, after `build_optimizer`.
    **task_settings: task arguments besides the model and the lengths.

  Returns:
    (out with the RSS after import and the optimizer's name, tf, the model
    config, task, model, optimizer: loss-scaled under mixed_float16).
  """
  out: Dict[str, Any] = {}
  tf, tf_keras = _setup_tf(spec)
  out["rss_after_import_gib"] = rss_gib()
  cfg, execution = _model(spec)
  from etc_realformer.training.optimization import build_optimizer  # pylint: disable=g-import-not-at-top
  task = make_task(model_config=cfg, execution=execution,
                   long_seq_len=spec.run.long_len,
                   global_seq_len=spec.run.global_len, **task_settings)
  model = task.build_model()
  optimizer, out["optimizer"] = _for_precision(
      tf_keras, spec,
      build_optimizer(train_steps=10000, **optimizer_settings),
      "etc_realformer.training.optimization.build_optimizer" + optimizer_name)
  return out, tf, cfg, task, model, optimizer


def _build(model, features, out: Dict[str, Any]) -> None:
  """Creates the variables; records the build time, size and baseline RSS."""
  t0 = time.perf_counter()
  model(features, training=False)
  out["eager_build_call_s"] = time.perf_counter() - t0
  out["num_parameters"] = int(sum(v.shape.num_elements()
                                  for v in model.trainable_variables))
  out["baseline_rss_gib"] = rss_gib()


def _loss_and_grads_fn(tf, spec: Spec, model, per_example_loss,
                       optimizer):
  """feats -> (mean loss, unscaled gradients of every trainable weight)."""
  scaled = spec.run.dtype == "mixed_float16"

  def loss_and_grads(feats):
    with tf.GradientTape() as tape:
      outputs = model(feats, training=True)
      loss = tf.reduce_mean(per_example_loss(feats, outputs))
      scaled_loss = optimizer.get_scaled_loss(loss) if scaled else loss
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    if scaled:
      grads = optimizer.get_unscaled_gradients(grads)
    return loss, grads
  return loss_and_grads


def _time_train_step(tf, spec: Spec, model, loss_and_grads,
                     optimizer, features, out: Dict[str, Any]) -> None:
  """Times `loss_and_grads` + the optimizer update; adds the timings and
  examples/s to `out`."""
  def train_step(feats):
    loss, grads = loss_and_grads(feats)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  step_fn = tf.function(train_step, jit_compile=spec.run.xla)
  out.update(time_calls(lambda: float(step_fn(features).numpy()),
                        spec.run.warmup, spec.run.repeats))
  out["examples_per_s"] = spec.run.batch_size / out["median_s"]


# ----------------------------------------------------------------- finetune
def measure_finetune(spec: Spec) -> Dict[str, Any]:
  """Times WikiHop training steps (forward, loss, backward, optimizer)."""
  def make_task(**settings):
    from tasks.wikihop.task import WikiHopTask  # pylint: disable=g-import-not-at-top
    return WikiHopTask(**settings)

  out, tf, cfg, task, model, optimizer = _training_setup(
      spec, make_task, dict(optimizer_type="adamw", learning_rate=5e-5),
      "(adamw, lr 5e-5, clip 1.0)")
  raw = wikihop_raw_features(spec.run.long_len, spec.run.global_len,
                             spec.run.batch_size, cfg.vocab_size,
                             spec.run.seed)
  out["real_long_tokens"] = raw.pop("real_long_tokens")
  out["real_global_tokens"] = raw.pop("real_global_tokens")
  features = {k: tf.constant(v) for k, v in raw.items()}
  _build(model, features, out)
  _time_train_step(tf, spec, model, _loss_and_grads_fn(
      tf, spec, model, task.per_example_loss, optimizer), optimizer,
                   features, out)
  return out


# ---------------------------------------------------------------- pretrain
# The benchmark's vocabulary facts (BERT's uncased ids): [PAD] 0, the
# summary token 1, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103.
PRETRAIN_MASK_ID = 103
PRETRAIN_SPECIAL_IDS = (0, 100, 101, 102, 103)


def pretrain_raw_features(long_len: int, global_len: int, batch: int,
                          vocab_size: int, seed: int,
                          tokens_per_sentence: int) -> Dict[str, Any]:
  """Stored pre-training examples (the `tasks/pretrain/features.py`
  layout): sentences of 1/2 to 3/2 x `tokens_per_sentence` random pieces
  (about 70% of them word starts), added while both inputs have room."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tasks.pretrain import features as pretrain_features  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(seed)
  f = {name: np.zeros([batch, long_len if i < 4 else global_len], np.int32)
       for i, name in enumerate(pretrain_features.FEATURES)}
  for row in range(batch):
    li = gi = 0
    while gi < global_len:
      n = int(rng.randint(max(1, tokens_per_sentence // 2),
                          tokens_per_sentence * 3 // 2 + 1))
      if li + n > long_len:
        break
      f["token_ids"][row, li:li + n] = rng.randint(
          max(PRETRAIN_SPECIAL_IDS) + 1, vocab_size, n)
      f["word_starts"][row, li:li + n] = rng.rand(n) < 0.7
      f["word_starts"][row, li] = 1
      f["sentence_ids"][row, li:li + n] = gi
      f["global_token_ids"][row, gi] = pretrain_features.DEFAULT_GLOBAL_TOKEN_ID
      li, gi = li + n, gi + 1
    f["long_breakpoints"][row, li - 1] = 1
    f["global_breakpoints"][row, gi - 1] = 1
  return f


def measure_pretrain(spec: Spec) -> Dict[str, Any]:
  """Times pre-training steps (forward with the CPC second pass, MLM + CPC
  loss, backward, LAMB update); see the module doc."""
  def make_task(**settings):
    from tasks.pretrain.masking import MaskingConfig  # pylint: disable=g-import-not-at-top
    from tasks.pretrain.task import PretrainTask  # pylint: disable=g-import-not-at-top
    # MLM predictions capped at 15% of L, rounded up (as every pre-training
    # record so far); the other masking and CPC settings are the defaults,
    # as in gin/tasks/pretrain.gin.
    masking = functools.partial(
        MaskingConfig, max_predictions_per_seq=math.ceil(
            MaskingConfig.masking_rate * settings["long_seq_len"]))
    return PretrainTask(masking_config=masking, **settings)

  out, tf, cfg, task, model, optimizer = _training_setup(
      spec, make_task,
      dict(optimizer_type="lamb", learning_rate=2.8284271e-3,
           weight_decay_rate=0.01),
      "(lamb, lr sqrt(8)e-3, weight decay 0.01, clip 1.0)",
      mask_token_id=PRETRAIN_MASK_ID, no_mask_token_ids=PRETRAIN_SPECIAL_IDS)

  raw = pretrain_raw_features(spec.run.long_len, spec.run.global_len,
                              spec.run.batch_size, cfg.vocab_size,
                              spec.run.seed,
                              spec.run.tokens_per_sentence)
  out["real_long_tokens"] = int(raw["long_breakpoints"][0].argmax()) + 1
  out["real_global_tokens"] = int(raw["global_breakpoints"][0].argmax()) + 1
  features = task.mask({k: tf.constant(v) for k, v in raw.items()},
                       tf.constant([spec.run.seed, 0], tf.int64))
  features = {k: v for k, v in features.items()
              if k in task.model_input_spec()}
  out["mlm_predictions"] = int(features["masked_lm_weights"][0].numpy().sum())
  out["cpc_sentences"] = int(features["cpc_weights"][0].numpy().sum())
  _build(model, features, out)
  loss_and_grads = _loss_and_grads_fn(tf, spec, model, task.per_example_loss,
                                      optimizer)
  _time_train_step(tf, spec, model, loss_and_grads, optimizer, features, out)
  out["tokens_per_s"] = (spec.run.batch_size * out["real_long_tokens"] /
                         out["median_s"])
  if spec.run.export_dir:
    def gradient_step(feats):
      # As the encoder export: the global norm keeps every gradient live.
      loss, grads = loss_and_grads(feats)
      return loss + tf.linalg.global_norm(grads)
    out.update(xla_export.write_module(
        tf, tf.function(gradient_step, jit_compile=True), features,
        model.variables, spec.record_fields()))
  return out


# --------------------------------------------------------------- xla export
def export_xla(spec: Spec) -> Dict[str, Any]:
  """Writes the encoder step's XLA module, inputs and manifest (see the
  module doc)."""
  out: Dict[str, Any] = {}
  tf, step_fn, features = _encoder_step(spec, out)
  model = out.pop("_model")
  out.update(xla_export.write_module(tf, step_fn, features, model.variables,
                                     spec.record_fields()))
  return out


# --------------------------------------------------------------------- main
def run(spec: Spec) -> Dict[str, Any]:
  """Runs one measurement; returns the fields the worker measured."""
  if spec.run.kind == "encoder":
    result = measure_encoder(spec)
  elif spec.run.kind == "matmul_floor":
    result = measure_matmul_floor(spec)
  elif spec.run.kind == "finetune":
    result = measure_finetune(spec)
  elif spec.run.kind == "pretrain":
    result = measure_pretrain(spec)
  elif spec.run.kind == "xla_export":
    result = export_xla(spec)
  else:
    raise ValueError(f"unknown measurement kind {spec.run.kind!r}")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  result["peak_rss_gib"] = peak_rss_gib()
  result["ru_maxrss_gib"] = ru_maxrss_gib()
  result["tf_version"] = tf.__version__
  result["intra_op_threads"] = (
      tf.config.threading.get_intra_op_parallelism_threads())
  result["inter_op_threads"] = (
      tf.config.threading.get_inter_op_parallelism_threads())
  result["gpus"] = [d.name for d in tf.config.list_physical_devices("GPU")]
  return result


def _write(path: str, obj: Dict[str, Any]) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f)
  os.replace(tmp, path)  # Atomic: the parent never reads half a file.


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--spec", required=True,
                      help="the measurement, a benchmark_spec.Spec as JSON")
  parser.add_argument("--result", required=True, help="output JSON path")
  args = parser.parse_args(argv)
  spec = Spec.from_json(args.spec)
  if spec.run.fail_for_test:
    # Lets the test check that a crashing measurement is recorded.
    raise RuntimeError("failure requested by the spec (fail_for_test)")
  if spec.run.sleep_for_test:
    time.sleep(spec.run.sleep_for_test)
  result = run(spec)
  for key, value in list(result.items()):
    if isinstance(value, float) and not math.isfinite(value):
      result[key] = None
  _write(args.result, result)
  return 0


if __name__ == "__main__":
  sys.exit(main())
