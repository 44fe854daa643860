"""The pre-training model: the ETC-RealFormer encoder, an MLM head and a CPC
head whose target comes from a second pass of the same encoder.

MLM: Model Garden's `official.nlp.modeling.layers.MaskedLM` on the long
output at `masked_lm_positions`, its output layer tied to the token
embedding table, with its own transform (dense + activation), LayerNorm and
output bias -- BERT's `cls/predictions/*` head (`load_lifted_mlm_head` reads
those names from a lifted BERT/RealFormer checkpoint).

CPC (Contrastive Predictive Coding on the sentence summary tokens): for each
CPC sentence (all its long tokens masked by `masking.py`, its summary token
left in the global input),

  prediction = the summary token's global output in the masked example;
  target     = the global output of the same encoder run on that sentence
               alone (its unmasked pieces, `cpc_token_ids`) with one global
               token that sees only it (breakpoints source, hard g2l when
               the config says so) -- the second pass, inside `call`.

Both go through the projection (`CpcHeadConfig.projection`), are
L2-normalised, and score each other by cosine similarity /
`CpcHeadConfig.temperature`. The InfoNCE loss
of a prediction is the cross-entropy of picking its own target among every
CPC sentence of the (per-replica) batch: the other sentences of its own
example and of the other examples are the negatives. Training batches may
add length-matched negatives, unmasked sentences of the batch that are
candidates only (`cpc_negative_token_ids`, `masking.py` step 3): their
targets come from the same second pass. With `cpc_same_length_in_training`
a training query's candidates are only those of its own length, so that the
length a fully masked sentence shows earns nothing.

The choices the ETC paper leaves open, and why (docs/pretraining.md,
"The model and the CPC choices"):

* projection: 'linear' by default, one Dense layer shared by prediction and
  target (SimCLR found a projection before the contrastive loss makes the
  encoder's own outputs better features; shared so that both sides live in
  one space); 'mlp' (dense-gelu-dense) or 'none' by gin; 'none+mlp'
  scores a weighted mean of two cosines (`mlp_view_weight`, 0.5), one of
  the summary outputs themselves and one of their MLP projection (the
  first keeps what the encoder computes, word content where the
  initialisation makes it a bag of its inputs; the second has room to
  learn other codes, such as the length).
* centring (`center`, off by default): predictions and targets each minus
  their batch mean before the cosine. Every summary token output shares a
  large common part (its own embedding, what all sentences share); the
  cosine of the raw outputs compares mostly that.
* temperature: 0.1 by default, in the range SimCLR and CLIP settle in for
  cosine logits: with 1.0 the logits span only [-1, 1] and the loss cannot
  fall far below log(candidates).
* stop-gradient on the target: off by default (gradients reach the encoder
  through both passes, as SimCLR's symmetric setup): the second pass is
  what teaches the encoder to summarise a lone sentence, which is the
  representation a fine-tuned sentence token starts from. The in-batch
  negatives keep the two sides from collapsing onto one vector.
  `cpc_stop_gradient = True` treats the target as a fixed label instead.
"""

import dataclasses
from typing import Dict, Optional

import tensorflow as tf
import tf_keras
from official.nlp.modeling import layers as nlp_layers

from etc_realformer.checkpoints.paths import resolve_checkpoint_path
from etc_realformer.errors import UserInputError
from etc_realformer.layers.activations import get_activation
from etc_realformer.training import task as task_lib
from tasks.common.featurization import logits as logits_lib

PROJECTIONS = ("none", "linear", "mlp", "none+mlp")
# Logit of a candidate slot that holds no sentence.
NEG_INF = logits_lib.NEG_INF


@dataclasses.dataclass(frozen=True)
class CpcHeadConfig:
  """The CPC head's settings (see the module docstring).

  Attributes:
    projection: 'none' | 'linear' | 'mlp'.
    projection_size: the projection's width (None: the encoder's
      hidden_size).
    temperature: the cosine logits' temperature.
    stop_gradient: no gradient through the target (second) pass.
    predictor: a linear map on the prediction side only, after the shared
      projection (CPC's bilinear score z^T W c), starting as the identity.
    same_length_in_training: in training, a query's candidates are only
      the sentences of its own length (the length-matched negatives and
      the batch's CPC sentences of that length), so that the length, which
      a fully masked sentence shows, earns nothing and only the context
      can lower the loss. Evaluation keeps every candidate.
    mlp_view_weight: w, for projection 'none+mlp': the score is (1 - w)
      x the cosine of the outputs + w x the cosine of their MLP
      projection (before the temperature).
    center: subtract the batch's mean prediction from every prediction
      and the mean target from every target (present slots only) before
      the cosine.
    mlp_view_gradient_scale: for projection 'none+mlp': the factor on the
      gradient the MLP view sends into the encoder (1: all of it; 0: none,
      only the first view shapes the encoder; the forward pass is the
      same).
  """
  projection: str = "linear"
  projection_size: Optional[int] = None
  temperature: float = 0.1
  stop_gradient: bool = False
  predictor: bool = False
  same_length_in_training: bool = False
  center: bool = False
  mlp_view_weight: float = 0.5
  mlp_view_gradient_scale: float = 1.0

  def __post_init__(self):
    # Named as gin binds them (CpcHeadConfig.*), which is where they are set.
    if self.projection not in PROJECTIONS:
      raise UserInputError(f"CpcHeadConfig.projection {self.projection!r} "
                           f"is not one of {PROJECTIONS}")
    if not 0.0 <= self.mlp_view_gradient_scale <= 1.0:
      raise UserInputError(f"CpcHeadConfig.mlp_view_gradient_scale must be "
                           f"in [0, 1], got {self.mlp_view_gradient_scale}")
    if not 0.0 <= self.mlp_view_weight <= 1.0:
      raise UserInputError(f"CpcHeadConfig.mlp_view_weight must be in "
                           f"[0, 1], got {self.mlp_view_weight}")
    if self.temperature <= 0:
      raise UserInputError(f"CpcHeadConfig.temperature must be positive, got "
                           f"{self.temperature}")


class PretrainModel(task_lib.EtcTaskModel):
  """Encoder + MLM head + CPC head (see the module docstring)."""

  def __init__(self, encoder, side_inputs_fn, *,
               hidden_act: str = "gelu",
               initializer_range: float = 0.02,
               global_token_id: int = 1,
               cpc: Optional[CpcHeadConfig] = None,
               **kwargs):
    super().__init__(encoder, side_inputs_fn, **kwargs)
    cpc = cpc or CpcHeadConfig()
    def init():
      # A new initializer per layer: one instance reused gives every layer
      # of the same shape the same initial weights.
      return tf_keras.initializers.TruncatedNormal(stddev=initializer_range)

    # The MLM output layer reads the embedding table, which exists once the
    # encoder is built.
    encoder.build()
    self.masked_lm = nlp_layers.MaskedLM(
        embedding_table=encoder.embeddings.token_embedding.embedding_table,
        activation=get_activation(hidden_act), initializer=init(),
        name="cls_predictions")
    width = cpc.projection_size or encoder.config.hidden_size
    self.cpc_projection_type = cpc.projection
    self.cpc_projection = []
    if cpc.projection == "linear":
      self.cpc_projection = [tf_keras.layers.Dense(
          width, kernel_initializer=init(), name="cpc_projection")]
    elif cpc.projection in ("mlp", "none+mlp"):
      self.cpc_projection = [
          tf_keras.layers.Dense(width, activation=get_activation(hidden_act),
                                kernel_initializer=init(),
                                name="cpc_projection_hidden"),
          tf_keras.layers.Dense(width, kernel_initializer=init(),
                                name="cpc_projection")]
    self.cpc_predictor = None
    if cpc.predictor:
      self.cpc_predictor = tf_keras.layers.Dense(
          width, use_bias=False,
          kernel_initializer=tf_keras.initializers.Identity(),
          name="cpc_predictor")
    self.global_token_id = global_token_id
    self.cpc_temperature = float(cpc.temperature)
    self.cpc_stop_gradient = bool(cpc.stop_gradient)
    self.cpc_same_length_in_training = bool(cpc.same_length_in_training)
    self.cpc_center = bool(cpc.center)
    self.cpc_mlp_view_weight = float(cpc.mlp_view_weight)
    self.cpc_mlp_view_gradient_scale = float(cpc.mlp_view_gradient_scale)

  def head(self, features: task_lib.Features, long_output: tf.Tensor,
           global_output: tf.Tensor, training: Optional[bool] = None
           ) -> Dict[str, tf.Tensor]:
    """Returns float32 `mlm_logits` [B, P, vocab], `mlm_predictions` [B, P],
    `cpc_logits` [B, C, B*C (+ B*C*K)] (each CPC sentence's scores over
    every CPC slot of the batch, then every negative slot when the batch
    has negatives; empty slots at NEG_INF), `cpc_labels` [B, C] (its own
    slot) and `cpc_predictions` [B, C]."""
    mlm_logits = tf.cast(self.masked_lm(
        long_output, masked_positions=tf.cast(
            features["masked_lm_positions"], tf.int32)), tf.float32)
    out = {"mlm_logits": mlm_logits,
           "mlm_predictions": tf.argmax(mlm_logits, axis=-1,
                                        output_type=tf.int32)}
    out.update(self.cpc(features, global_output, training))
    return out

  def cpc_target_features(self, features: task_lib.Features
                          ) -> Dict[str, tf.Tensor]:
    """The second pass's inputs: each CPC sentence alone, [B*C, S], then
    the negatives, [B*C*K, S], when the batch has them; one global token
    each (the order of `features.py`)."""
    tokens = tf.cast(features["cpc_token_ids"], tf.int32)
    max_len = tokens.shape[-1]
    tokens = tf.reshape(tokens, [-1, max_len])
    lengths = self.cpc_target_lengths(features)
    if "cpc_negative_token_ids" in features:
      tokens = tf.concat([tokens, tf.reshape(tf.cast(
          features["cpc_negative_token_ids"], tf.int32), [-1, max_len])], 0)
    present = tf.cast(lengths > 0, tf.int32)[:, tf.newaxis]
    return {
        "token_ids": tokens,
        "global_token_ids": present * self.global_token_id,
        "long_breakpoints": tf.one_hot(lengths - 1, max_len, dtype=tf.int32),
        "global_breakpoints": present,
        "sentence_ids": tf.zeros_like(tokens),
    }

  def cpc_target_lengths(self, features: task_lib.Features) -> tf.Tensor:
    """The candidates' lengths in pieces, [B*C (+ B*C*K)] (0: empty)."""
    lengths = tf.reshape(tf.cast(features["cpc_lengths"], tf.int32), [-1])
    if "cpc_negative_lengths" in features:
      lengths = tf.concat([lengths, tf.reshape(tf.cast(
          features["cpc_negative_lengths"], tf.int32), [-1])], 0)
    return lengths

  def project(self, x: tf.Tensor, prediction: bool = False,
              present: Optional[tf.Tensor] = None) -> tf.Tensor:
    """The projection (then, for predictions, the predictor), centred on
    the mean of the `present` rows (bool [N]; default every row) when
    `center` is set, L2-normalised in float32. For 'none+mlp': both views
    so normalised, concatenated and weighted by sqrt(1 - w) and sqrt(w),
    so that a dot product of two such rows is the weighted sum of the two
    cosines (a unit vector of twice the width)."""
    def finish(x):
      x = tf.cast(x, tf.float32)
      if self.cpc_center:
        if present is None:
          mean = tf.reduce_mean(x, 0, keepdims=True)
        else:
          weight = tf.cast(present, tf.float32)[:, tf.newaxis]
          mean = tf.reduce_sum(x * weight, 0, keepdims=True) / tf.maximum(
              tf.reduce_sum(weight), 1.0)
        x = x - mean
      return tf.math.l2_normalize(x, axis=-1)

    outputs = x
    scale = self.cpc_mlp_view_gradient_scale
    if self.cpc_projection_type == "none+mlp" and scale < 1.0:
      # The same value; a gradient scaled by `scale` on its way back.
      x = scale * x + (1.0 - scale) * tf.stop_gradient(x)
    for layer in self.cpc_projection:
      x = layer(x)
    if prediction and self.cpc_predictor is not None:
      x = self.cpc_predictor(x)
    if self.cpc_projection_type == "none+mlp":
      # Both views, each normalised and weighted: the score is
      # (1 - w) x the first view's cosine + w x the second's.
      w = self.cpc_mlp_view_weight
      return tf.concat([finish(outputs) * (1.0 - w) ** 0.5,
                        finish(x) * w ** 0.5], -1)
    return finish(x)

  def cpc(self, features: task_lib.Features, global_output: tf.Tensor,
          training: Optional[bool]) -> Dict[str, tf.Tensor]:
    positions = tf.cast(features["cpc_global_positions"], tf.int32)
    batch = tf.shape(positions)[0]
    slots = positions.shape[1]
    predicted = tf.gather(global_output, positions, batch_dims=1)
    predicted = tf.reshape(predicted, [-1, global_output.shape[-1]])
    _, target_global = self.encode(self.cpc_target_features(features),
                                   training=training)
    target = target_global[:, 0]
    if self.cpc_stop_gradient:
      target = tf.stop_gradient(target)
    queries = tf.reshape(features["cpc_weights"], [-1]) > 0
    present = queries
    if "cpc_negative_lengths" in features:
      present = tf.concat([present, tf.reshape(
          features["cpc_negative_lengths"], [-1]) > 0], 0)
    logits = tf.matmul(
        self.project(predicted, prediction=True, present=queries),
        self.project(target, present=present),
        transpose_b=True) / self.cpc_temperature
    keep = present[tf.newaxis]
    if training and self.cpc_same_length_in_training:
      lengths = self.cpc_target_lengths(features)
      keep = keep & tf.equal(
          tf.reshape(tf.cast(features["cpc_lengths"], tf.int32), [-1, 1]),
          lengths[tf.newaxis])
    logits = tf.where(keep, logits, NEG_INF)
    logits = tf.reshape(logits, [batch, slots, -1])
    labels = tf.reshape(tf.range(batch * slots), [batch, slots])
    return {"cpc_logits": logits, "cpc_labels": labels,
            "cpc_predictions": tf.argmax(logits, axis=-1,
                                         output_type=tf.int32)}


# BERT's masked-LM head in a Google-format (and lifted) checkpoint, by name
# -> the `MaskedLM` variable it sets.
MLM_PREFIX = "cls/predictions/"
MLM_NAMES = ("transform/dense/kernel", "transform/dense/bias",
             "transform/LayerNorm/gamma", "transform/LayerNorm/beta",
             "output_bias")


def mlm_head_variables(model: PretrainModel) -> Dict[str, tf.Variable]:
  """`cls/predictions/<name>` -> the model's MLM head variable (built)."""
  mlm = model.masked_lm
  if not mlm.built:
    raise ValueError("build the model before reading its MLM head")
  return {MLM_PREFIX + "transform/dense/kernel": mlm.dense.kernel,
          MLM_PREFIX + "transform/dense/bias": mlm.dense.bias,
          MLM_PREFIX + "transform/LayerNorm/gamma": mlm.layer_norm.gamma,
          MLM_PREFIX + "transform/LayerNorm/beta": mlm.layer_norm.beta,
          MLM_PREFIX + "output_bias": mlm.bias}


def load_mlm_head(model: PretrainModel, path: str) -> bool:
  """Loads BERT's `cls/predictions/*` head into the model's MLM head.

  Written by hand because neither library loader reads it into this model:
  `checkpoints.official` loads the encoder only (the head is outside
  `etc_document_bert/`) and `checkpoints.bert` loads a `BertModel`. Checked
  in the same strict style: every name present with the model's shape, or
  one error listing every problem, and nothing is assigned partially.

  Args:
    model: a built `PretrainModel`.
    path: a name-based checkpoint (prefix or directory), e.g. the output of
      `python -m tools.checkpoints.lift_checkpoint`.

  Returns:
    True when the head was loaded, False when the checkpoint holds no
    `cls/predictions/` variable at all (a released ETC checkpoint, a TF2
    checkpoint).

  Raises:
    UserInputError: the checkpoint holds some of the head but not all of it,
      or a tensor of another shape (every problem listed).
  """
  prefix = resolve_checkpoint_path(path)
  shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  if not any(name.startswith(MLM_PREFIX) for name in shapes):
    return False
  expected = mlm_head_variables(model)
  problems = [f"missing {name}" for name in sorted(expected)
              if name not in shapes]
  problems += [f"{name}: checkpoint {shapes[name]} vs model "
               f"{var.shape.as_list()}"
               for name, var in sorted(expected.items())
               if name in shapes and list(shapes[name]) != var.shape.as_list()]
  if problems:
    raise UserInputError(
        f"{prefix}: the MLM head cls/predictions/* does not fit the model "
        f"(vocab_size / hidden_size / embedding_size?): " +
        "; ".join(problems))
  reader = tf.train.load_checkpoint(prefix)
  for name, var in expected.items():
    var.assign(tf.cast(reader.get_tensor(name), var.dtype))
  return True
