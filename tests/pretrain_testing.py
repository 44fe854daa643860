"""Pre-training test fixtures: a tiny corpus in BERT's layout over the
words of the tiny WikiHop vocabulary (so that a model pre-trained on it
fine-tunes on `wikihop_testing`'s data), its TFRecords, a tiny task and its
gin config, and a hand-made batch of stored features."""

import functools
import os
import random
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from etc_realformer import EtcConfig
from tasks.common.inputs import record_stats
from tasks.pretrain import data
from tasks.pretrain import features
from tasks.pretrain import head
from tasks.pretrain import masking
from tasks.pretrain import preprocess
from tasks.pretrain import task as pretrain_task
import wikihop_testing

LONG, GLOBAL = 64, 8
# The tiny WikiHop model's shape (`wikihop_testing.tiny_gin`): a pre-trained
# encoder of this config fine-tunes there.
VOCAB_SIZE = 120


def write_corpus(path: str, num_docs: int = 24, seed: int = 0,
                 sentences=(7, 12)) -> str:
  """Documents of 7-12 sentences of the tiny WikiHop words, BERT's layout."""
  rng = random.Random(seed)
  words = [f"w{i}" for i in range(60)] + [f"ent{i}" for i in range(30)]
  docs = []
  for _ in range(num_docs):
    topic = rng.sample(words, 8)
    docs.append("\n".join(
        " ".join(rng.choice(topic) for _ in range(rng.randint(3, 9))) + " ."
        for _ in range(rng.randint(*sentences))))
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    f.write("\n\n".join(docs) + "\n")
  return path


def write_data(root: str, num_docs: int = 24, eval_fraction: float = 0.25,
               num_shards: int = 2) -> Dict[str, str]:
  """The tiny WikiHop vocab.txt, a corpus and its TFRecords under `root`;
  returns the paths (vocab, corpus, data dir, stats)."""
  wikihop_testing.write_tiny_wikihop(root, num_train=2, num_dev=1)
  vocab = os.path.join(root, "vocab.txt")
  corpus = write_corpus(os.path.join(root, "corpus.txt"), num_docs)
  featurizer = features.PretrainFeaturizer(vocab_path=vocab,
                                           long_seq_len=LONG,
                                           global_seq_len=GLOBAL)
  stats = record_stats.RecordStats(input_file=corpus, strict=True)
  out = os.path.join(root, "data")
  preprocess.preprocess_documents(
      data.read_documents(corpus, stats), featurizer, out,
      preprocess.Settings(eval_fraction=eval_fraction,
                          num_shards=num_shards),
      stats, preprocess.vocabulary_info(featurizer.tokenizer))
  return {"vocab": vocab, "corpus": corpus, "data": out,
          "stats": os.path.join(out, preprocess.STATS_FILE)}


def tiny_config(**overrides) -> EtcConfig:
  """The tiny WikiHop test model's config (hard g2l as pre-training)."""
  values = dict(vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, local_radius=8,
                relative_pos_max_distance=4, relative_vocab_size=12,
                residual_attention=True, use_hard_g2l_mask=True)
  values.update(overrides)
  return EtcConfig(**values)


def tiny_task(masking_fields: Optional[Mapping[str, Any]] = None,
              cpc_fields: Optional[Mapping[str, Any]] = None,
              **kwargs) -> pretrain_task.PretrainTask:
  """A tiny PretrainTask at LONG, GLOBAL ([MASK] = 14 unless given).

  Args:
    masking_fields: `masking.MaskingConfig` fields besides the vocabulary
      facts (max_predictions_per_seq: 10, 15% of LONG rounded up, unless
      given).
    cpc_fields: `head.CpcHeadConfig` fields.
    **kwargs: other `PretrainTask` arguments.
  """
  kwargs.setdefault("mask_token_id", 14)
  kwargs.setdefault("model_config", tiny_config())
  fields = {"max_predictions_per_seq": 10, **(masking_fields or {})}
  return pretrain_task.PretrainTask(
      long_seq_len=LONG, global_seq_len=GLOBAL,
      masking_config=functools.partial(masking.MaskingConfig, **fields),
      cpc_head=head.CpcHeadConfig(**(cpc_fields or {})), **kwargs)


def tiny_gin_lines(paths: Dict[str, str], train_steps: int,
                   num_layers: int = 2) -> List[str]:
  """Gin lines of a tiny pre-training run on `write_data`'s files
  (checkpoints every 2 steps)."""
  return [
      "include 'tasks/pretrain.gin'",
      "etc_config.vocab_size = 120",
      "etc_config.hidden_size = 32",
      "etc_config.intermediate_size = 64",
      f"etc_config.num_hidden_layers = {num_layers}",
      "etc_config.num_attention_heads = 4",
      "etc_config.local_radius = 8",
      "etc_config.relative_pos_max_distance = 4",
      "etc_config.relative_vocab_size = 12",
      "etc_config.residual_attention = True",
      f"PretrainTask.long_seq_len = {LONG}",
      f"PretrainTask.global_seq_len = {GLOBAL}",
      f"PretrainTask.train_input = '{paths['data']}/train-*.tfrecord'",
      f"PretrainTask.eval_input = '{paths['data']}/eval-*.tfrecord'",
      f"PretrainTask.train_stats_file = '{paths['stats']}'",
      f"PretrainTask.vocab_file = '{paths['vocab']}'",
      "PretrainTask.seed = 1",
      "MaskingConfig.max_predictions_per_seq = 12",
      "MaskingConfig.max_cpc_sentences = 2",
      "MaskingConfig.cpc_max_sentence_len = 16",
      "optimizer.learning_rate = 1e-3",
      "optimizer.warmup_steps = 0",
      "TrainerConfig.train_batch_size = 4",
      "TrainerConfig.eval_batch_size = 8",
      "TrainerConfig.eval_steps = -1",
      f"TrainerConfig.train_steps = {train_steps}",
      "TrainerConfig.steps_per_loop = 2",
      "TrainerConfig.checkpoint_interval = 2",
  ]


def hand_batch() -> Dict[str, np.ndarray]:
  """Two stored examples at LONG=64, GLOBAL=8:

  example 0: sentences of 5, 3, 6 and 4 pieces (ids 20.., words of 1-2
    pieces: every other piece continues a word), with a [SEP] (13) as the
    last piece of sentence 2;
  example 1: sentences of 2 and 7 pieces.
  """
  f = {name: np.zeros([2, LONG], np.int32) for name in features.FEATURES[:4]}
  f.update({name: np.zeros([2, GLOBAL], np.int32)
            for name in features.FEATURES[4:]})
  for b, lengths in enumerate(((5, 3, 6, 4), (2, 7))):
    n = sum(lengths)
    f["token_ids"][b, :n] = np.arange(20, 20 + n) + 30 * b
    f["sentence_ids"][b, :n] = np.repeat(np.arange(len(lengths)), lengths)
    starts = np.zeros(n, np.int32)
    starts[::2] = 1
    starts[np.cumsum((0,) + lengths[:-1])] = 1
    f["word_starts"][b, :n] = starts
    f["long_breakpoints"][b, n - 1] = 1
    f["global_token_ids"][b, :len(lengths)] = 1
    f["global_breakpoints"][b, len(lengths) - 1] = 1
  f["token_ids"][0, 5 + 3 + 5] = 13
  return f
