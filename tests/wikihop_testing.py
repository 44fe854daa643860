"""WikiHop test fixtures: a tiny task and a hand-made batch of its features
(the head and task tests); a tiny learnable set in the released format, its
TFRecords and a tiny gin config (the end-to-end test and the trainer's tests
that run the real runner)."""

import json
import os
import random
from typing import Dict

import numpy as np
import tensorflow as tf

from etc_realformer import EtcConfig
from tasks.wikihop import preprocess as wikihop_preprocess
from tasks.wikihop import task as wikihop_task

# The hand-made batch's lengths.
L, G = 32, 8


def tiny_task(**kwargs) -> wikihop_task.WikiHopTask:
  """A 1-layer WikiHop task at L, G (no vocabulary unless given)."""
  config = EtcConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32,
                     local_radius=4, relative_pos_max_distance=2,
                     relative_vocab_size=8, residual_attention=True)
  return wikihop_task.WikiHopTask(model_config=config, long_seq_len=L,
                                  global_seq_len=G, **kwargs)


def two_records() -> Dict[str, tf.Tensor]:
  """Features of two records: 3 and 2 candidates, a query token, one
  1-sentence document; the first labelled 2 ("oslo"), the second not."""
  f = {k: np.zeros([2, L], np.int32) for k in (
      "token_ids", "segment_ids", "long_paragraph_breakpoints")}
  f.update({k: np.full([2, L], -1, np.int32) for k in (
      "long_paragraph_ids", "long_sentence_ids", "l2g_linked_ids")})
  f.update({k: np.zeros([2, G], np.int32) for k in (
      "global_token_ids", "global_segment_ids",
      "global_paragraph_breakpoints", "ignore_hard_g2l_mask",
      "candidate_mask")})
  for b, num_c in enumerate((3, 2)):
    # Long: one wordpiece per candidate, one query wordpiece, a 4-token doc.
    n = num_c + 1 + 4
    f["token_ids"][b, :n] = np.arange(20, 20 + n)
    f["long_paragraph_breakpoints"][b, :num_c + 1] = 1
    f["long_paragraph_breakpoints"][b, n - 1] = 1
    f["long_sentence_ids"][b, :num_c + 1] = np.arange(num_c + 1)
    f["long_sentence_ids"][b, num_c + 1:n] = num_c + 2
    f["long_paragraph_ids"][b, num_c + 1:n] = num_c + 1
    # Global: candidates, query token, paragraph token, sentence token.
    f["global_token_ids"][b, :num_c + 3] = [4] * num_c + [3, 5, 1]
    f["global_paragraph_breakpoints"][b, :num_c + 1] = 1
    f["global_paragraph_breakpoints"][b, num_c + 2] = 1
    f["candidate_mask"][b, :num_c] = 1
    f["ignore_hard_g2l_mask"][b, :num_c + 1] = 1
  f = {k: tf.constant(v) for k, v in f.items()}
  f["label"] = tf.constant([2, -1], tf.int32)
  f["example_id"] = tf.constant([b"WH_1", b"WH_2"])
  f["candidates"] = tf.constant([[b"paris", b"rome", b"oslo"],
                                 [b"lima", b"quito", b""]])
  return f

LONG, GLOBAL = 128, 32

_WORDS = [f"w{i}" for i in range(60)]
_ENTITIES = [f"ent{i}" for i in range(30)]


def write_tiny_wikihop(out_dir: str, num_train: int = 48, num_dev: int = 8,
                       seed: int = 0) -> None:
  """qangaroo-format train.json/dev.json and a WordPiece vocab.txt.

  Each record has 4 candidates; one support says "<subject> located in
  <answer> ." and the query is "country <subject>", so the answer is
  learnable from the supports.
  """
  rng = random.Random(seed)
  vocab = (["[PAD]"] + [f"[unused{i}]" for i in range(10)] +
           ["[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + _WORDS +
           _ENTITIES + ["located", "in", "country"])
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "vocab.txt"), "w") as f:
    f.write("\n".join(vocab) + "\n")

  def filler(n):
    return " ".join(rng.choice(_WORDS) for _ in range(n))

  def record(i, split):
    candidates = rng.sample(_ENTITIES, 4)
    answer = rng.choice(candidates)
    subject = rng.choice(_WORDS)
    supports = [f"{filler(5)} . {filler(4)} ." for _ in range(3)]
    supports.insert(rng.randrange(4),
                    f"{subject} located in {answer} . {filler(4)} .")
    return {"id": f"WH_{split}_{i}", "query": f"country {subject}",
            "candidates": candidates, "answer": answer, "supports": supports}

  for split, n in (("train", num_train), ("dev", num_dev)):
    with open(os.path.join(out_dir, f"{split}.json"), "w") as f:
      json.dump([record(i, split) for i in range(n)], f)


def preprocess(data_dir: str) -> None:
  """train/dev.json -> train/dev.tfrecord at LONG, GLOBAL (all kept)."""
  featurizer = wikihop_preprocess.make_featurizer(
      os.path.join(data_dir, "vocab.txt"), None, LONG, GLOBAL)
  for split in ("train", "dev"):
    stats = wikihop_preprocess.preprocess_file(
        os.path.join(data_dir, f"{split}.json"), data_dir, featurizer)
    assert stats.examples_written == stats.examples_read > 0


def tiny_gin(data_dir: str, path: str, **extra) -> str:
  """A 2-layer model on the tiny set: 100 steps, checkpoints every 20."""
  lines = [
      "include 'models/etc_tiny.gin'",
      "etc_config.vocab_size = 120",
      "etc_config.hidden_size = 32",
      "etc_config.intermediate_size = 64",
      "etc_config.num_hidden_layers = 2",
      f"WikiHopTask.long_seq_len = {LONG}",
      f"WikiHopTask.global_seq_len = {GLOBAL}",
      f"WikiHopTask.train_input = '{data_dir}/train.tfrecord'",
      f"WikiHopTask.eval_input = '{data_dir}/dev.tfrecord'",
      f"WikiHopTask.predict_input = '{data_dir}/dev.tfrecord'",
      f"WikiHopTask.vocab_file = '{data_dir}/vocab.txt'",
      "WikiHopTask.seed = 1",
      # From scratch, WikiHop's candidate global tokens start identical (same
      # id, near-uniform attention): a wider init and no dropout noise let the
      # 100-step run leave that symmetric start reliably.
      "etc_config.initializer_range = 0.1",
      "etc_config.hidden_dropout_prob = 0.0",
      "etc_config.attention_probs_dropout_prob = 0.0",
      "optimizer.learning_rate = 3e-3",
      "TrainerConfig.train_batch_size = 8",
      "TrainerConfig.eval_batch_size = 8",
      "TrainerConfig.train_steps = 100",
      "TrainerConfig.steps_per_loop = 10",
      "TrainerConfig.checkpoint_interval = 20",
      "TrainerConfig.max_checkpoints_to_keep = 3",
      "TrainerConfig.eval_interval = 100",
  ] + [f"{k} = {v}" for k, v in extra.items()]
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  return path
