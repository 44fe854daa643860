"""Loading Google-format BERT checkpoints (released BERT and RealFormer) into
`BertModel`.

The checkpoints are TF1 name-based (`bert/embeddings/...`,
`bert/encoder/layer_N/...`, `bert/pooler/dense`, and the pre-training heads
`cls/predictions/...`, `cls/seq_relationship/...`), kernels 2-D
[in, out] as Google's BERT. As for the released ETC checkpoints
(`checkpoints/official.py`), the whole checkpoint is checked against the
model first and a mismatch raises one error listing every missing,
unexpected and mis-shaped variable; nothing is loaded partially. BERT's
weights map onto the dense form's long input; the global input, which BERT
does not have, holds copies of the same weights (its one token is seen by
nobody).
"""

import re
from typing import Dict, List, NamedTuple

from absl import logging
import numpy as np
import tensorflow as tf

from etc_realformer.checkpoints.official import mismatch_report
from etc_realformer.checkpoints.paths import list_checkpoint_variables
from etc_realformer.checkpoints.paths import read_checkpoint_tensors
from etc_realformer.checkpoints.paths import resolve_checkpoint_path
from etc_realformer.errors import UserInputError

# Optimizer slots and bookkeeping a BERT checkpoint may hold.
_SKIPPED = re.compile(
    r"(^global_step$)|(/(adam_m|adam_v|Adam|Adam_1|lamb_m|lamb_v|Momentum)$)|"
    r"(^(beta1_power|beta2_power)$)|(^_CHECKPOINTABLE_OBJECT_GRAPH$)")
MLM_PREFIX = "cls/predictions/"
NSP_PREFIX = "cls/seq_relationship/"


class BertLoadReport(NamedTuple):
  """What `load_bert_checkpoint` did."""
  path: str
  loaded: List[str]
  skipped: List[str]  # optimizer slots, global_step, heads the model lacks


class BertCheckpointMismatchError(UserInputError):
  """The checkpoint does not fit the model; the message lists every problem."""


def variable_map(model) -> Dict[str, List[tf.Variable]]:
  """BERT checkpoint name -> the `BertModel` variables it sets.

  Building the model first if needed; the MLM head's names are present only
  when the model has the head.
  """
  _build(model)
  enc = model.encoder
  emb = enc.embeddings
  out: Dict[str, List[tf.Variable]] = {
      "bert/embeddings/word_embeddings": [emb.token_embedding.embedding_table],
      "bert/embeddings/token_type_embeddings": [
          emb.segment_embedding.embedding_table],
      "bert/embeddings/position_embeddings": [
          emb.long_position_embedding.embedding_table,
          emb.global_position_embedding.embedding_table],
  }
  _norm(out, "bert/embeddings/LayerNorm", emb.long_norm, emb.global_norm)
  for i, block in enumerate(enc.blocks):
    att = block.attention
    prefix = f"bert/encoder/layer_{i}"
    for bert_name, layer in (
        ("attention/self/query", att.long_query_projection),
        ("attention/self/key", att.l2l_key_projection),
        ("attention/self/value", att.l2l_value_projection),
        ("attention/output/dense", att.long_output_projection),
        ("intermediate/dense", block.long_ff.layer_0),
        ("output/dense", block.long_ff.layer_1)):
      out[f"{prefix}/{bert_name}/kernel"] = [layer.kernel]
      out[f"{prefix}/{bert_name}/bias"] = [layer.bias]
    _norm(out, f"{prefix}/attention/output/LayerNorm", block.long_att_norm,
          block.global_att_norm)
    _norm(out, f"{prefix}/output/LayerNorm", block.long_ff_norm)
  out["bert/pooler/dense/kernel"] = [model.pooler.kernel]
  out["bert/pooler/dense/bias"] = [model.pooler.bias]
  if model.masked_lm is not None:
    mlm = model.masked_lm
    out[MLM_PREFIX + "transform/dense/kernel"] = [mlm.dense.kernel]
    out[MLM_PREFIX + "transform/dense/bias"] = [mlm.dense.bias]
    _norm(out, MLM_PREFIX + "transform/LayerNorm", mlm.layer_norm)
    out[MLM_PREFIX + "output_bias"] = [mlm.bias]
  return out


def _norm(out, name, *norms) -> None:
  out[name + "/gamma"] = [n.gamma for n in norms]
  out[name + "/beta"] = [n.beta for n in norms]


def _build(model) -> None:
  if not model.built:
    inputs = {"input_ids": tf.zeros([1, 2], tf.int32)}
    if model.masked_lm is not None:
      inputs["masked_lm_positions"] = tf.zeros([1, 1], tf.int32)
    model(inputs, training=False)


def read_checkpoint(path: str) -> Dict[str, np.ndarray]:
  """Every tensor of a name-based checkpoint (prefix, directory or index)."""
  return read_checkpoint_tensors(resolve_checkpoint_path(path))


def load_bert_checkpoint(model, path: str) -> BertLoadReport:
  """Loads a BERT-format checkpoint into a `BertModel`.

  Args:
    model: a `BertModel` (built on demand).
    path: checkpoint prefix (`.../model.ckpt` / `bert_model.ckpt`), its
      directory, or its `.index` file.

  Returns:
    A `BertLoadReport`.

  Raises:
    BertCheckpointMismatchError: listing every missing, unexpected and
      mis-shaped variable (with a hint for the config field that decides
      them); the model is left untouched.
  """
  prefix = resolve_checkpoint_path(path)
  shapes = dict(list_checkpoint_variables(prefix))
  expected = variable_map(model)

  skipped, unexpected = [], []
  for name in sorted(shapes):
    if name in expected:
      continue
    if (_SKIPPED.search(name) or name.startswith(NSP_PREFIX) or
        (name.startswith(MLM_PREFIX) and model.masked_lm is None)):
      skipped.append(name)
    else:
      unexpected.append(name)
  report = mismatch_report(
      f"BERT checkpoint {prefix} does not match the model config:", shapes,
      {name: variables[0].shape.as_list()
       for name, variables in expected.items()}, unexpected, _HINTS,
      "check {} against the checkpoint's bert_config.json")
  if report:
    raise BertCheckpointMismatchError(report)

  values = read_checkpoint_tensors(prefix, expected)  # all, then assign
  for name, variables in expected.items():
    for var in variables:
      var.assign(tf.cast(values[name], var.dtype))
  logging.info("loaded %d BERT variables from %s (skipped %d)",
               len(expected), prefix, len(skipped))
  return BertLoadReport(prefix, sorted(expected), skipped)


# Which config field decides a checkpoint name, for the mismatch hint.
_HINTS = (
    (r"word_embeddings", "vocab_size (a different vocabulary)"),
    (r"position_embeddings", "max_position_embeddings"),
    (r"token_type_embeddings", "type_vocab_size"),
    (r"layer_\d+/", "num_hidden_layers / hidden_size / intermediate_size"),
    (r"bert/pooler",
     "the pooler (every BERT checkpoint has bert/pooler/dense)"),
    (re.escape(MLM_PREFIX), "with_masked_lm (the checkpoint has no MLM head)"),
)
