"""Helpers for the BERT tests: checkpoints in Google's BERT layout written
from seeded random tensors, and a plain post-LN transformer in NumPy
(Google's BERT, with RealFormer's residual scores as an option) written from
the papers' definitions, sharing no code with the library."""

import json
import math
import os
from typing import Dict, Optional

import numpy as np
import tensorflow as tf


def bert_tensors(config: Dict, seed: int = 0, heads: bool = True,
                 pooler: bool = True) -> Dict[str, np.ndarray]:
  """Every tensor of a BERT checkpoint of `config` (a bert_config dict)."""
  rng = np.random.RandomState(seed)
  h, f = config["hidden_size"], config["intermediate_size"]

  def normal(*shape, scale=0.2):
    return (scale * rng.normal(size=shape)).astype(np.float32)

  def norm(prefix, out):
    out[prefix + "/gamma"] = 1.0 + normal(h, scale=0.1)
    out[prefix + "/beta"] = normal(h, scale=0.1)

  out = {"bert/embeddings/word_embeddings": normal(config["vocab_size"], h),
         "bert/embeddings/token_type_embeddings": normal(
             config["type_vocab_size"], h),
         "bert/embeddings/position_embeddings": normal(
             config["max_position_embeddings"], h)}
  norm("bert/embeddings/LayerNorm", out)
  for i in range(config["num_hidden_layers"]):
    p = f"bert/encoder/layer_{i}"
    for name, (n_in, n_out) in (("attention/self/query", (h, h)),
                                ("attention/self/key", (h, h)),
                                ("attention/self/value", (h, h)),
                                ("attention/output/dense", (h, h)),
                                ("intermediate/dense", (h, f)),
                                ("output/dense", (f, h))):
      out[f"{p}/{name}/kernel"] = normal(n_in, n_out)
      out[f"{p}/{name}/bias"] = normal(n_out, scale=0.1)
    norm(f"{p}/attention/output/LayerNorm", out)
    norm(f"{p}/output/LayerNorm", out)
  if pooler:
    out["bert/pooler/dense/kernel"] = normal(h, h)
    out["bert/pooler/dense/bias"] = normal(h, scale=0.1)
  if heads:
    out["cls/predictions/transform/dense/kernel"] = normal(h, h)
    out["cls/predictions/transform/dense/bias"] = normal(h, scale=0.1)
    norm("cls/predictions/transform/LayerNorm", out)
    out["cls/predictions/output_bias"] = normal(config["vocab_size"],
                                                scale=0.1)
    out["cls/seq_relationship/output_weights"] = normal(2, h)
    out["cls/seq_relationship/output_bias"] = normal(2, scale=0.1)
    out["global_step"] = np.array(100, np.int64)
  return out


def write_bert_dir(directory: str, config: Dict, seed: int = 0,
                   tensors: Optional[Dict[str, np.ndarray]] = None,
                   vocab: bool = True, **kwargs) -> str:
  """A BERT download: bert_config.json, bert_model.ckpt.*, vocab.txt."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "bert_config.json"), "w") as f:
    json.dump(config, f)
  tensors = tensors if tensors is not None else bert_tensors(config, seed,
                                                             **kwargs)
  prefix = os.path.join(directory, "bert_model.ckpt")
  names = sorted(tensors)
  tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names,
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.constant(tensors[n]) for n in names])
  if vocab:
    with open(os.path.join(directory, "vocab.txt"), "w") as f:
      f.write("".join(f"tok{i}\n" for i in range(config["vocab_size"])))
  return prefix


def _layer_norm(x, gamma, beta, eps=1e-12):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * gamma + beta


_ACTIVATIONS = {
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(
        math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "linear": lambda x: x,
}


def numpy_bert(w: Dict[str, np.ndarray], config: Dict, input_ids,
               input_mask, token_type_ids, residual: bool = False,
               running_mean: bool = False) -> Dict[str, np.ndarray]:
  """BERT's forward pass (inference) in float64.

  Residual attention (RealFormer): each layer's scaled scores q.k/sqrt(d)
  plus the previous layers' running sum are carried on; the softmax sees
  that sum (divided by the layer count with `running_mean`) plus the mask's
  -10000.
  """
  w = {k: np.asarray(v, np.float64) for k, v in w.items()}
  act = _ACTIVATIONS[config["hidden_act"]]
  heads = config["num_attention_heads"]
  s = input_ids.shape[1]
  x = (w["bert/embeddings/word_embeddings"][input_ids] +
       w["bert/embeddings/token_type_embeddings"][token_type_ids] +
       w["bert/embeddings/position_embeddings"][:s][np.newaxis])
  x = _layer_norm(x, w["bert/embeddings/LayerNorm/gamma"],
                  w["bert/embeddings/LayerNorm/beta"])
  embedding = x
  adder = -10000.0 * (1.0 - input_mask[:, np.newaxis, np.newaxis, :])
  stream, layers = None, []
  for i in range(config["num_hidden_layers"]):
    p = f"bert/encoder/layer_{i}/"

    def dense(t, name):
      return t @ w[p + name + "/kernel"] + w[p + name + "/bias"]

    def split(t):
      b, n, hd = t.shape
      return t.reshape(b, n, heads, hd // heads).transpose(0, 2, 1, 3)

    q = split(dense(x, "attention/self/query"))
    k = split(dense(x, "attention/self/key"))
    v = split(dense(x, "attention/self/value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    logits = scores
    if residual:
      stream = scores if stream is None else scores + stream
      logits = stream / (i + 1) if running_mean else stream
    logits = logits + adder
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
    x = _layer_norm(x + dense(ctx, "attention/output/dense"),
                    w[p + "attention/output/LayerNorm/gamma"],
                    w[p + "attention/output/LayerNorm/beta"])
    hidden = act(dense(x, "intermediate/dense"))
    x = _layer_norm(x + dense(hidden, "output/dense"),
                    w[p + "output/LayerNorm/gamma"],
                    w[p + "output/LayerNorm/beta"])
    layers.append(x)
  pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] +
                   w["bert/pooler/dense/bias"])
  return {"sequence_output": x, "pooled_output": pooled,
          "encoder_outputs": layers, "embedding_output": embedding}
