"""The WikiHop model: the ETC-RealFormer encoder and a candidate head.

One logit per global token (a Dense(1) over `global_output`); the softmax
runs over the candidate global tokens only (`candidate_mask`; the others get
a large negative logit, in float32 even under mixed precision). The chosen
global index is the chosen candidate, as the candidates come first in the
global input (`features.py`).
"""

from typing import Dict, Optional

import tensorflow as tf
import tf_keras

from etc_realformer.training import task as task_lib
from tasks.common.featurization import logits as logits_lib
from tasks.wikihop import features as features_lib

# Logit given to non-candidate global tokens.
NEG_INF = logits_lib.NEG_INF


class WikiHopModel(task_lib.EtcTaskModel):
  """Encoder + one logit per global token, softmax support = candidates."""

  def __init__(self, encoder, side_inputs_fn, initializer_range: float = 0.02,
               **kwargs):
    super().__init__(encoder, side_inputs_fn, **kwargs)
    self.logits_layer = tf_keras.layers.Dense(
        1, kernel_initializer=tf_keras.initializers.TruncatedNormal(
            stddev=initializer_range),
        name="wikihop_logits")

  def head(self, features: task_lib.Features, long_output: tf.Tensor,
           global_output: tf.Tensor, training: Optional[bool] = None
           ) -> Dict[str, tf.Tensor]:
    """Returns float32 `logits` [B, G] (non-candidates at NEG_INF),
    `probabilities` [B, G] and the chosen global index `prediction` [B]."""
    del long_output, training
    logits = tf.cast(tf.squeeze(self.logits_layer(global_output), -1),
                     tf.float32)
    is_candidate = tf.cast(features[features_lib.CANDIDATE_MASK], tf.bool)
    logits = tf.where(is_candidate, logits, NEG_INF)
    return {"logits": logits,
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "prediction": tf.argmax(logits, axis=-1, output_type=tf.int32)}
