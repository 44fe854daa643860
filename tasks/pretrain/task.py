"""ETC-RealFormer pre-training (MLM + CPC): the registered task
`@register_task("pretrain")`.

Data: the TFRecords of `preprocess.py` (`features.feature_spec`: unmasked
documents cut at sentence boundaries, one global token per sentence); the
input pipeline masks every batch anew (`masking.py`: whole-word MLM, CPC
sentences), with stateless draws seeded by (seed, batch number), so a run is
reproducible given `seed` and evaluation always sees the same masks. Side
inputs: the "breakpoints" source. Model: `head.PretrainModel` (encoder, MLM
head, CPC head with the second encoder pass). Loss per example:
`mlm_weight` x its mean MLM cross-entropy + `cpc_weight` x its mean CPC
InfoNCE loss (0.8 / 0.2, the paper's). Metrics: `mlm_accuracy`, `mlm_loss`,
`cpc_accuracy` (top-1 among the batch's CPC sentences), `cpc_loss`.
`official_scores` (`--mode=eval`): MLM accuracy with the most-frequent-token
baseline and CPC accuracy with chance and the length-only baseline
(`evaluate.py`).

The vocabulary facts the masking needs -- the [MASK] id, the special ids
never masked, the most frequent wordpiece -- come from the training data's
stats file (`train_stats_file`, written by `preprocess.py`) unless given.
The masking choices (`masking.MaskingConfig`) and the CPC head
(`head.CpcHeadConfig`) are taken whole; gin binds their fields by class
name (`MaskingConfig.max_predictions_per_seq = 640`,
`CpcHeadConfig.projection = 'linear'`: gin/tasks/pretrain.gin).

An MLM head in BERT's format (`cls/predictions/*`, as
`python -m tools.checkpoints.lift_checkpoint` keeps it) is loaded from
`mlm_head_checkpoint`, or else from `TrainerConfig.init_checkpoint` when
that checkpoint holds one (the trainer's `init_checkpoint` loads the
encoder only).
"""

import dataclasses
import os
import random
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple)

from absl import logging
import gin
import tensorflow as tf
import tf_keras

from etc_realformer.errors import UserInputError
from etc_realformer.training import task as task_lib
from tasks.common.featurization import tokenization
from tasks.common.inputs import record_stats
from tasks.pretrain import decode
from tasks.pretrain import evaluate
from tasks.pretrain import features as pretrain_features
from tasks.pretrain import head
from tasks.pretrain import masking

# The stored features the model reads (besides the masking outputs).
MODEL_FEATURES = ("token_ids", "sentence_ids", "long_breakpoints",
                  "global_token_ids", "global_breakpoints")
# Evaluation masks: fixed, so every evaluation of a run (and of two runs)
# scores the same positions.
EVAL_MASKING_SEED = 20200417
# The two configs' fields are bound in gin by their class names
# (`MaskingConfig.masking_rate = 0.15`, `CpcHeadConfig.temperature = 0.1`).
# The vocabulary facts come from the data (`PretrainTask.train_stats_file`,
# `mask_token_id`, ...) and the model, so gin may not bind them.
GinMaskingConfig = gin.external_configurable(
    masking.MaskingConfig, denylist=["vocab_size", "mask_token_id",
                                     "no_mask_token_ids"])
GinCpcHeadConfig = gin.external_configurable(head.CpcHeadConfig)


def read_stats(path: str) -> Dict[str, Any]:
  """The preprocessing stats JSON (`preprocess.py`).

  Raises:
    FileNotFoundError: no such file; UserInputError: not a stats file.
  """
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(f"{path}: pre-training stats file not found")
  stats = record_stats.read_stats_json(path)
  if not isinstance(stats, dict) or "vocabulary" not in stats:
    raise UserInputError(f"{path}: not a pre-training stats file (no "
                         "'vocabulary'); it is written by "
                         "python -m tasks.pretrain.preprocess")
  return stats


@task_lib.register_task("pretrain")
class PretrainTask(task_lib.Task):
  """ETC pre-training: MLM + CPC (see the module docstring)."""

  side_input_source = "breakpoints"

  def __init__(self,
               long_seq_len: int = 4096,
               global_seq_len: int = 512,
               train_stats_file: Optional[str] = None,
               mask_token_id: Optional[int] = None,
               no_mask_token_ids: Optional[Sequence[int]] = None,
               most_frequent_token_id: Optional[int] = None,
               global_token_id: int = pretrain_features.DEFAULT_GLOBAL_TOKEN_ID,
               masking_config: Callable[..., masking.MaskingConfig] = (
                   GinMaskingConfig),
               cpc_head: Optional[head.CpcHeadConfig] = None,
               mlm_weight: float = 0.8,
               cpc_weight: float = 0.2,
               mlm_head_checkpoint: Optional[str] = None,
               vocab_file: Optional[str] = None,
               spm_model_file: Optional[str] = None,
               lower_case: bool = True,
               **kwargs):
    """Pre-training settings.

    Args:
      long_seq_len, global_seq_len: as in preprocessing (4096; G bounds the
        sentences per example).
      train_stats_file: the training data's `*.stats.json`; supplies
        `mask_token_id`, `no_mask_token_ids` and `most_frequent_token_id`
        where they are not given.
      mask_token_id: the id of [MASK].
      no_mask_token_ids: ids never masked for MLM ([CLS], [SEP], ...).
      most_frequent_token_id: the training corpus's most frequent wordpiece,
        for the MLM baseline of `official_scores` (None: no baseline).
      global_token_id: the sentence summary token's id (also of the CPC
        second pass's single global token).
      masking_config: makes the `masking.MaskingConfig` from the vocabulary
        facts (`vocab_size`, `mask_token_id`, `no_mask_token_ids`), which
        the task supplies; its other fields are the masking choices. The
        default is gin's `MaskingConfig` (`MaskingConfig.masking_rate =
        0.15`); in Python, e.g. `functools.partial(masking.MaskingConfig,
        max_predictions_per_seq=40)`. `max_predictions_per_seq` is
        MaskingConfig's (640, for 4096 tokens) unless set: set it with
        shorter inputs. `cpc_max_sentence_len` is capped at `long_seq_len`.
      cpc_head: the CPC head (`head.CpcHeadConfig`); None: gin's
        `CpcHeadConfig` (`CpcHeadConfig.projection = 'linear'`).
      mlm_weight, cpc_weight: the loss weights (0.8 / 0.2).
      mlm_head_checkpoint: a checkpoint with BERT's `cls/predictions/*`
        (a lifted one); default: `TrainerConfig.init_checkpoint` if it has
        them.
      vocab_file / spm_model_file, lower_case: the vocabulary, for the
        readable samples in the predictions report (optional).
      **kwargs: `Task` arguments (input patterns, seed, ...).
    """
    super().__init__(long_seq_len=long_seq_len,
                     global_seq_len=global_seq_len, **kwargs)
    stats = read_stats(train_stats_file) if train_stats_file else {}
    vocabulary = stats.get("vocabulary", {})
    if mask_token_id is None:
      mask_token_id = vocabulary.get("mask_token_id")
    if mask_token_id is None:
      raise UserInputError(
          "PretrainTask needs the [MASK] id: set PretrainTask.mask_token_id "
          "or PretrainTask.train_stats_file (the preprocessing stats)")
    if no_mask_token_ids is None:
      no_mask_token_ids = vocabulary.get("special_token_ids", ())
    if most_frequent_token_id is None and stats.get(
        "most_frequent_wordpiece"):
      most_frequent_token_id = stats["most_frequent_wordpiece"]["id"]
    vocab_size = self.model_config.vocab_size
    if vocabulary.get("size") and vocabulary["size"] > vocab_size:
      raise UserInputError(
          f"{train_stats_file}: the data's vocabulary has "
          f"{vocabulary['size']} entries, more than etc_config.vocab_size "
          f"{vocab_size}")
    if mlm_weight < 0 or cpc_weight < 0 or mlm_weight + cpc_weight <= 0:
      raise UserInputError(f"mlm_weight {mlm_weight} and cpc_weight "
                           f"{cpc_weight} must be >= 0, not both 0")
    chosen = masking_config(vocab_size=vocab_size,
                            mask_token_id=int(mask_token_id),
                            no_mask_token_ids=tuple(no_mask_token_ids))
    self.masking = dataclasses.replace(
        chosen, cpc_max_sentence_len=min(chosen.cpc_max_sentence_len,
                                         long_seq_len))
    # Evaluation, prediction and serving: no negatives (see above).
    self.eval_masking = dataclasses.replace(self.masking, cpc_negatives=0)
    self.most_frequent_token_id = most_frequent_token_id
    self.global_token_id = global_token_id
    self.mlm_weight = float(mlm_weight)
    self.cpc_weight = float(cpc_weight)
    self.cpc_head = cpc_head if cpc_head is not None else GinCpcHeadConfig()
    self.mlm_head_checkpoint = mlm_head_checkpoint
    self.vocab_file = vocab_file
    self.spm_model_file = spm_model_file
    self.lower_case = lower_case
    # Without a seed, training masks still differ per batch, from a random
    # base drawn once per run.
    self._train_masking_seed = (self.seed if self.seed is not None else
                                random.SystemRandom().randrange(2**31))

  # ------------------------------------------------------------------ data
  def feature_spec(self):
    return pretrain_features.feature_spec(self.long_seq_len,
                                          self.global_seq_len)

  def model_features(self) -> Tuple[str, ...]:
    return MODEL_FEATURES + tuple(masking.OUTPUTS)

  def model_input_spec(self) -> Dict[str, tf.TensorSpec]:
    spec = self.feature_spec()
    out = {k: tf.TensorSpec([None, *spec[k][1]], spec[k][0], name=k)
           for k in MODEL_FEATURES}
    out.update(self.eval_masking.output_spec())
    return out

  def mask(self, features: task_lib.Features, seed,
           training: bool = False) -> task_lib.Features:
    """Masks a parsed batch (`masking.mask_batch` with this task's
    settings; CPC negatives only when `training`); `seed` <int>[2]."""
    return masking.mask_batch(
        features, self.masking if training else self.eval_masking, seed)

  def build_inputs(self, mode: str, global_batch_size: int,
                   input_context: Optional[tf.distribute.InputContext] = None
                   ) -> tf.data.Dataset:
    """The base pipeline (files, shuffle, batch, parse), then the masks:
    batch i of input pipeline p gets the stateless seed
    (base, p * 2^31 + i), where base is the task's seed in training and a
    fixed one in eval/predict."""
    ds = super().build_inputs(mode, global_batch_size, input_context)
    base = (self._train_masking_seed if mode == "train"
            else EVAL_MASKING_SEED)
    pipeline = input_context.input_pipeline_id if input_context else 0

    # Straight-line code, traced without AutoGraph (as the base pipeline).
    @tf.autograph.experimental.do_not_convert
    def mask(index, features):
      seed = tf.stack([tf.constant(base, tf.int64),
                       tf.constant(pipeline, tf.int64) * 2**31 + index])
      return self.mask(features, seed, training=mode == "train")

    return ds.enumerate().map(
        mask, num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True).prefetch(tf.data.AUTOTUNE)

  # ----------------------------------------------------------------- model
  def build_model(self) -> head.PretrainModel:
    model = head.PretrainModel(
        self.build_encoder(), self.side_inputs,
        hidden_act=self.model_config.hidden_act,
        initializer_range=self.model_config.initializer_range,
        global_token_id=self.global_token_id,
        cpc=self.cpc_head,
        name="pretrain_model")
    self._load_mlm_head(model)
    return model

  def _load_mlm_head(self, model: head.PretrainModel) -> None:
    """The MLM head from `mlm_head_checkpoint`, else from the trainer's
    `init_checkpoint` when it holds one (see the module docstring).

    A resumed run restores its own checkpoint over this afterwards.
    """
    path = self.mlm_head_checkpoint
    if not path:
      # The trainer's gin settings; read, never changed.
      from etc_realformer.training import experiment  # pylint: disable=g-import-not-at-top
      path = experiment.TrainerConfig().init_checkpoint
      if not path:
        return
      explicit = False
    else:
      explicit = True
    model(self.dummy_features(), training=False)
    if head.load_mlm_head(model, path):
      logging.info("MLM head loaded from %s (cls/predictions/*)", path)
    elif explicit:
      raise UserInputError(f"{path}: no MLM head (cls/predictions/*) in "
                           "PretrainTask.mlm_head_checkpoint")

  # -------------------------------------------------------- loss & metrics
  def mlm_losses(self, features, outputs) -> tf.Tensor:
    """float32 [B, P] cross-entropy per prediction (0 on empty slots)."""
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(features["masked_lm_ids"], tf.int32),
        logits=outputs["mlm_logits"])
    return tf.where(features["masked_lm_weights"] > 0, ce, 0.0)

  def cpc_losses(self, features, outputs) -> tf.Tensor:
    """float32 [B, C] InfoNCE loss per CPC sentence (0 on empty slots)."""
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=outputs["cpc_labels"], logits=outputs["cpc_logits"])
    return tf.where(features["cpc_weights"] > 0, ce, 0.0)

  def per_example_loss(self, features, outputs) -> tf.Tensor:
    """mlm_weight x mean MLM loss + cpc_weight x mean CPC loss, per example
    (a term is 0 for an example without predictions of its kind)."""
    def mean(losses, weights):
      weights = tf.cast(weights, tf.float32)
      return tf.reduce_sum(losses * weights, axis=1) / tf.maximum(
          tf.reduce_sum(weights, axis=1), 1.0)
    mlm = mean(self.mlm_losses(features, outputs),
               features["masked_lm_weights"])
    cpc = mean(self.cpc_losses(features, outputs), features["cpc_weights"])
    return self.mlm_weight * mlm + self.cpc_weight * cpc

  def build_metrics(self) -> List[tf_keras.metrics.Metric]:
    return [tf_keras.metrics.Mean(name, dtype=tf.float32)
            for name in ("mlm_accuracy", "mlm_loss", "cpc_accuracy",
                         "cpc_loss")]

  def update_metrics(self, metrics, features, outputs) -> None:
    mlm_w = tf.cast(features["masked_lm_weights"], tf.float32)
    cpc_w = tf.cast(features["cpc_weights"], tf.float32)
    mlm_correct = tf.cast(tf.equal(outputs["mlm_predictions"], tf.cast(
        features["masked_lm_ids"], tf.int32)), tf.float32)
    cpc_correct = tf.cast(tf.equal(outputs["cpc_predictions"],
                                   outputs["cpc_labels"]), tf.float32)
    metrics[0].update_state(mlm_correct, sample_weight=mlm_w)
    metrics[1].update_state(self.mlm_losses(features, outputs),
                            sample_weight=mlm_w)
    metrics[2].update_state(cpc_correct, sample_weight=cpc_w)
    metrics[3].update_state(self.cpc_losses(features, outputs),
                            sample_weight=cpc_w)

  # ------------------------------------------------------------ predictions
  def prediction_outputs(self, features, outputs):
    """Per example: MLM ids, predictions, correctness and weights [B, P];
    CPC correctness, weights, length-only baseline, whether the pick has
    the query's length and correctness among the candidates of that length
    [B, C]; chance [B] (1 / the batch's CPC sentences)."""
    ids = tf.cast(features["masked_lm_ids"], tf.int32)
    cpc_w = tf.cast(features["cpc_weights"], tf.float32)
    lengths = tf.reshape(tf.cast(features["cpc_lengths"], tf.int32), [-1])
    present = tf.reshape(cpc_w, [-1]) > 0
    # Candidates of the same length as each query (the true one included).
    same = tf.equal(lengths[:, tf.newaxis], lengths[tf.newaxis]) & present[
        tf.newaxis]
    ties = tf.reduce_sum(tf.cast(same, tf.float32), axis=1)
    length_baseline = tf.reshape(1.0 / tf.maximum(ties, 1.0),
                                 tf.shape(cpc_w)) * cpc_w
    candidates = tf.reduce_sum(tf.cast(present, tf.float32))
    chance = tf.fill([tf.shape(ids)[0]], 1.0 / tf.maximum(candidates, 1.0))
    # What the model reads (`evaluate.py`): whether its pick has the query's
    # length, and whether it picks right among the candidates of that length
    # (the context's share; its chance level is the length-only baseline).
    slots = tf.shape(lengths)[0]
    predicted = tf.reshape(outputs["cpc_predictions"], [-1])
    same_length_pick = tf.reshape(tf.cast(tf.equal(
        tf.gather(lengths, predicted), lengths), tf.float32), tf.shape(cpc_w))
    logits = tf.reshape(outputs["cpc_logits"], [slots, slots])
    within = tf.argmax(tf.where(same, logits, head.NEG_INF), axis=-1,
                       output_type=tf.int32)
    correct_within = tf.reshape(tf.cast(tf.equal(within, tf.range(slots)),
                                        tf.float32), tf.shape(cpc_w))
    return {
        "masked_lm_positions": tf.cast(features["masked_lm_positions"],
                                       tf.int32),
        "masked_lm_ids": ids,
        "masked_lm_weights": tf.cast(features["masked_lm_weights"],
                                     tf.float32),
        "mlm_predictions": outputs["mlm_predictions"],
        "mlm_correct": tf.cast(tf.equal(outputs["mlm_predictions"], ids),
                               tf.float32),
        "cpc_weights": cpc_w,
        "cpc_correct": tf.cast(tf.equal(outputs["cpc_predictions"],
                                        outputs["cpc_labels"]), tf.float32),
        "cpc_length_baseline": length_baseline,
        "cpc_chance": chance,
        "cpc_same_length_pick": same_length_pick * cpc_w,
        "cpc_correct_within_length": correct_within * cpc_w,
    }

  def scores(self, predictions: Mapping[str, Any]) -> Dict[str, Any]:
    return evaluate.scores(predictions, self.most_frequent_token_id)

  def write_predictions(self, predictions: Mapping[str, Any],
                        output_dir: str) -> str:
    """`pretrain_eval.json`: the scores of `evaluate.scores` (and, with a
    vocabulary, readable samples of the first examples' predictions)."""
    report = self.scores(predictions)
    if self.vocab_file or self.spm_model_file:
      tokenizer = tokenization.make_tokenizer(
          self.vocab_file, self.spm_model_file, lower_case=self.lower_case)
      vocab = getattr(tokenizer, "vocab", None)
      if vocab:
        report["samples"] = decode.samples(predictions, vocab)
    path = os.path.join(output_dir, evaluate.SCORES_FILE)
    evaluate.write_scores(path, report)
    return path

  def official_scores(self, predictions: Mapping[str, Any],
                      output_dir: str) -> Optional[Dict[str, Any]]:
    """MLM and CPC accuracy with their baselines (`evaluate.scores`)."""
    del output_dir
    return self.scores(predictions)

  # ----------------------------------------------------------------- export
  def serving_outputs(self, features, outputs):
    del features
    return {"mlm_predictions": outputs["mlm_predictions"],
            "cpc_predictions": outputs["cpc_predictions"]}

  def serving_features(self, examples):
    """Stored examples masked with the evaluation seed, so `serve_examples`
    scores what `--mode=eval` scores (`serving_default` takes masked
    features, as training feeds the model)."""
    return self.mask(self.parse_examples(examples),
                     tf.constant([EVAL_MASKING_SEED, 0], tf.int64))
