"""`BertModel`: BERT and RealFormer BERT as this project's encoder in its
dense form.

    config = BertConfig.from_json_file("realformer_bert_base/bert_config.json")
    model = BertModel(config)
    load_bert_checkpoint(model, "realformer_bert_base/model.ckpt")
    out = model(dict(input_ids=..., input_mask=..., token_type_ids=...))
    out["sequence_output"]   # [B, S, H]
    out["pooled_output"]     # [B, H]
    out["encoder_outputs"]   # list of [B, S, H], one per layer
    out["embedding_output"]  # [B, S, H]

A BERT layer is an ETC layer whose long input is the sequence, whose band
covers every position (radius max_position_embeddings - 1, computed densely)
and whose one global token nobody attends to: masks keep the global token
out of the long branch's softmax, so the long branch computes exactly
BERT's attention, with RealFormer's residual scores where the config asks
for them (the same core, `etc_realformer.attention.core`). Word, token-type and
position embeddings are ETC's token, segment and long position tables.
"""

from typing import Any, Dict, Mapping, Optional

import tensorflow as tf
import tf_keras
from official.nlp.modeling import layers as nlp_layers

from etc_realformer.bert_config import BertConfig
from etc_realformer.errors import UserInputError
from etc_realformer.execution import ExecutionConfig
from etc_realformer.features import masks
from etc_realformer.layers.activations import get_activation
from etc_realformer.layers.projections import Linear
from etc_realformer.networks.etc_model import EtcModel


class BertModel(tf_keras.Model):
  """BERT / RealFormer BERT (see the module docstring).

  Weight names are mapped onto Google's BERT checkpoint layout by
  `etc_realformer.checkpoints.bert`.
  """

  def __init__(self, config: BertConfig,
               residual_attention: Optional[bool] = None,
               with_masked_lm: bool = False,
               execution: Optional[ExecutionConfig] = None, **kwargs):
    """Args:
      config: the BERT config (Google's or RealFormer's JSON).
      residual_attention: overrides the config's choice (on for a RealFormer
        JSON, off for Google's).
      with_masked_lm: add BERT's masked-LM head (`masked_lm`), whose output
        weights are the word embeddings (`cls/predictions/*` loads into it).
      execution: how the encoder runs; its `att_implementation` is "full"
        unless given (the band covers the whole sequence).
    """
    super().__init__(**kwargs)
    if residual_attention is not None:
      config = BertConfig(**{**config.to_dict(), "residual_attention":
                             residual_attention})
    self.config = config
    init = tf_keras.initializers.TruncatedNormal(
        stddev=config.initializer_range)
    self.encoder = EtcModel(
        config.to_etc_config(),
        execution or ExecutionConfig(att_implementation="full"),
        name="bert_encoder")
    self.pooler = Linear(config.hidden_size, init, name="pooler")
    self.masked_lm = None
    if with_masked_lm:
      self.encoder.build()
      self.masked_lm = nlp_layers.MaskedLM(
          embedding_table=self.embedding_table,
          activation=get_activation(config.hidden_act), initializer=init,
          name="cls_predictions")

  @property
  def embedding_table(self) -> tf.Variable:
    """The word embeddings <float>[vocab, hidden] (the MLM's output too)."""
    return self.encoder.embeddings.token_embedding.embedding_table

  # Traced without AutoGraph, as EtcModel.call.
  @tf.autograph.experimental.do_not_convert
  def call(self, inputs: Mapping[str, Any], training: Optional[bool] = None
           ) -> Dict[str, Any]:
    """Encodes a batch.

    Args:
      inputs: `input_ids` <int32>[B, S]; optionally `input_mask` [B, S]
        (1 = token, 0 = padding; default all 1), `token_type_ids` [B, S]
        (default 0), and with the masked-LM head `masked_lm_positions`
        [B, P].
      training: dropout on.

    Returns:
      `sequence_output` <T>[B, S, H], `pooled_output` [B, H] (tanh of a
      dense layer on the first token), `encoder_outputs` (a list of [B, S, H],
      one per layer), `embedding_output` [B, S, H] (after the embeddings'
      LayerNorm), and with the head and `masked_lm_positions`,
      `masked_lm_logits` <float32>[B, P, vocab].
    """
    input_ids = tf.convert_to_tensor(inputs["input_ids"])
    seq_len = input_ids.shape[1]
    max_len = self.config.max_position_embeddings
    if seq_len is not None and seq_len > max_len:
      raise UserInputError(f"input_ids: sequence length {seq_len} is longer "
                           f"than max_position_embeddings {max_len}")
    input_mask = inputs.get("input_mask")
    if input_mask is None:
      input_mask = tf.ones_like(input_ids)
    token_type_ids = inputs.get("token_type_ids")
    if token_type_ids is None:
      token_type_ids = tf.zeros_like(input_ids)
    batch = tf.shape(input_ids)[0]
    length = tf.shape(input_ids)[1]
    # Every query sees every real key (padding queries too, as in BERT); the
    # one global token is seen by no long token.
    features = {
        "token_ids": input_ids,
        "segment_ids": token_type_ids,
        "global_token_ids": tf.zeros([batch, 1], input_ids.dtype),
        "l2l_att_mask": masks.gather_local_windows(
            tf.cast(input_mask, tf.int32), self.encoder.config.local_radius),
        "l2g_att_mask": tf.zeros([batch, length, 1], tf.int32),
        "g2g_att_mask": tf.ones([batch, 1, 1], tf.int32),
        "g2l_att_mask": tf.zeros([batch, 1, length], tf.int32),
    }
    out = self.encoder.encode(features, training=training,
                              return_layer_outputs=True)
    sequence_output = out.long_output
    pooled = tf.tanh(self.pooler(sequence_output[:, 0]))
    result = {"sequence_output": sequence_output,
              "pooled_output": pooled,
              "encoder_outputs": [long for long, _ in out.layer_outputs],
              "embedding_output": out.embedding_long}
    if self.masked_lm is not None and "masked_lm_positions" in inputs:
      result["masked_lm_logits"] = tf.cast(
          self.masked_lm(sequence_output,
                         masked_positions=tf.cast(
                             inputs["masked_lm_positions"], tf.int32)),
          tf.float32)
    return result
