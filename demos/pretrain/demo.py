r"""The pre-training demo: a tiny ETC-RealFormer learns MLM and CPC from the
Python documentation, on a CPU, in minutes, with nothing to download.

  python -m demos.pretrain.demo --output_dir=pretrain_demo [--seed=0]

1. writes the corpus (`demos.pretrain.corpus`: the documentation topics
   shipped with CPython, `pydoc_data.topics`, PSF License, as documents in
   BERT's plain-text layout) and learns a WordPiece vocabulary from it;
2. preprocesses it (`tasks.pretrain.preprocess`: documents of at least
   MIN_SENTENCES sentences, 15% of them held out for evaluation, cut into
   examples of LONG_SEQ_LEN wordpieces / GLOBAL_SEQ_LEN sentences);
3. pre-trains a tiny ETC-RealFormer from scratch with the one runner
   (`tasks/pretrain.gin`, then the demo's gin: model size, masking, CPC,
   optimizer), with masks drawn anew every batch;
4. evaluates on the held-out documents (`--mode=eval`: MLM accuracy and
   its most-frequent-token baseline, CPC accuracy, chance and the
   length-only baseline, all measured) and prints

     pretrain | mlm accuracy: X (most-frequent-token baseline: Y)
     pretrain | cpc accuracy: X (chance: Y, length-only baseline: Z)

   and what the CPC accuracy is made of: the share of picks that have the
   masked sentence's length, and the accuracy among the candidates of that
   length (what the context adds; its chance is the length-only baseline).

Everything goes to --output_dir (data/, model/ with checkpoints and
operative_config.gin, demo.gin, demo_results.json). The same training with
the binary: `python -m tasks.pretrain --gin_file=OUTPUT_DIR/demo.gin
--mode=train --model_dir=...`. Measured results and what was tried:
docs/pretraining.md, "The demo".
"""

import os
from typing import Any, Dict, List, Optional

from absl import flags

from demos import common
from demos.pretrain import corpus
from etc_realformer import cli
from etc_realformer.errors import UserInputError
from tasks import run
from tasks.common.command_line import preprocess_flags
from tasks.common.inputs import record_stats
from tasks.pretrain import data
from tasks.pretrain import features
from tasks.pretrain import preprocess

LONG_SEQ_LEN = 256
GLOBAL_SEQ_LEN = 32
MIN_SENTENCES = 4
CPC_MAX_SENTENCE_LEN = 64
EVAL_FRACTION = 0.15
TRAIN_STEPS = 750
LEARNING_RATE = 1e-2


def demo_gin(data_dir: str, vocab_size: int, train_steps: int,
             seed: int) -> str:
  """The demo's gin config (also written to OUTPUT_DIR/demo.gin)."""
  # The demos' tiny ETC-RealFormer with 2 layers (relative ids and residual
  # attention from models/etc_tiny.gin), 128 wide, a wider feed-forward,
  # an initialisation under which a summary token starts as a bag of its
  # sentence's pieces (identity value/output projections, each sentence
  # token attending to its own pieces), and each summary token told its
  # sentence's length, which attention cannot count (docs/pretraining.md,
  # "The demo").
  return common.model_gin("tasks/pretrain.gin", vocab_size, 2) + f"""\
etc_config.hidden_size = 128
etc_config.intermediate_size = 256
etc_config.value_output_identity_init = 1.0
etc_config.own_sentence_bias_init = 4.0
etc_config.max_sentence_length_embeddings = {CPC_MAX_SENTENCE_LEN + 1}

""" + common.task_gin("PretrainTask", LONG_SEQ_LEN, GLOBAL_SEQ_LEN, data_dir,
                      "train-*.tfrecord", "eval-*.tfrecord", seed) + f"""\
PretrainTask.train_stats_file = '{data_dir}/{preprocess.STATS_FILE}'
MaskingConfig.max_predictions_per_seq = 40
MaskingConfig.cpc_sentence_rate = 0.1
MaskingConfig.max_cpc_sentences = 2
MaskingConfig.cpc_max_sentence_len = {CPC_MAX_SENTENCE_LEN}
# The CPC head that reads the context (docs/pretraining.md, "The demo"):
# centred cosines of the summary outputs themselves and of an MLP view
# that learns from them without shaping them, length-matched negatives in
# training.
CpcHeadConfig.projection = 'none+mlp'
CpcHeadConfig.mlp_view_gradient_scale = 0.0
CpcHeadConfig.center = True
CpcHeadConfig.temperature = 0.05
MaskingConfig.cpc_negatives = 3

optimizer.optimizer_type = 'lamb'
optimizer.learning_rate = {LEARNING_RATE!r}
optimizer.warmup_steps = 100
TrainerConfig.train_batch_size = 16
# The whole held-out set in one batch: every CPC query has all held-out CPC
# sentences as candidates (chance and the length-only baseline are measured
# on that same pool).
TrainerConfig.eval_batch_size = 128
TrainerConfig.eval_steps = -1
TrainerConfig.train_steps = {train_steps}
TrainerConfig.steps_per_loop = 100
TrainerConfig.checkpoint_interval = {train_steps}
TrainerConfig.jit_compile = True
"""


def make_data(data_dir: str, seed: int,
              max_documents: Optional[int] = None) -> Dict[str, Any]:
  """Corpus, vocabulary and TFRecords in `data_dir`; the preprocessing
  stats."""
  corpus_path = os.path.join(data_dir, "pydoc_topics.txt")
  vocab_path = os.path.join(data_dir, "vocab.txt")
  corpus.write_corpus(corpus_path, max_documents)
  corpus.build_vocab(corpus_path, vocab_path)
  featurizer = features.PretrainFeaturizer(
      vocab_path=vocab_path, long_seq_len=LONG_SEQ_LEN,
      global_seq_len=GLOBAL_SEQ_LEN)
  stats = record_stats.RecordStats(input_file=corpus_path, strict=True)
  return preprocess.preprocess_documents(
      data.read_documents(corpus_path, stats), featurizer, data_dir,
      preprocess.Settings(min_sentences=MIN_SENTENCES,
                          eval_fraction=EVAL_FRACTION, seed=seed),
      stats, preprocess.vocabulary_info(featurizer.tokenizer),
      {"input": [corpus_path], "corpus": corpus.SOURCE})


def run_demo(output_dir: str, seed: int = 0,
             train_steps: int = TRAIN_STEPS,
             gin_files: Optional[List[str]] = None,
             gin_bindings: Optional[List[str]] = None,
             max_documents: Optional[int] = None) -> Dict[str, Any]:
  """Runs the whole demo; returns the measured scores and timings.

  `max_documents` keeps the corpus's first documents only (a quick look;
  the default is all of them).
  """
  if train_steps < 1:
    raise UserInputError(f"--train_steps must be positive, got "
                         f"{train_steps}")
  clock = common.Stopwatch()
  dirs = common.DemoDirs.under(output_dir)
  stats = make_data(dirs.data, seed, max_documents)
  print(f"pretrain | data: {stats['documents']['train']} train / "
        f"{stats['documents']['eval']} held-out documents, "
        f"{stats['examples']['train']} / {stats['examples']['eval']} "
        f"examples, most frequent wordpiece "
        f"{stats['most_frequent_wordpiece']['piece']!r}", flush=True)
  clock.lap("data")
  common.configure_gin(
      dirs, demo_gin(dirs.data, stats["vocabulary"]["size"], train_steps,
                     seed), gin_files, gin_bindings)
  run.run("train", dirs.model)
  clock.lap("train")
  results = run.run("eval", dirs.model)
  clock.lap("eval")
  official = results["official"]
  summary = {"official": official,
             "eval": {k: v for k, v in results.items() if k != "official"},
             "data": {k: stats[k] for k in ("documents", "examples",
                                            "tokens",
                                            "most_frequent_wordpiece")},
             "corpus": corpus.SOURCE, "seed": seed,
             "train_steps": train_steps, "seconds": clock.summary()}
  common.write_results(dirs, summary)
  return summary


def summary_lines(summary: Dict[str, Any]) -> List[str]:
  """The demo's result lines."""
  s = summary["official"]
  return [
      f"pretrain | mlm accuracy: {s['mlm_accuracy']:.4f} "
      f"(most-frequent-token baseline: "
      f"{s['mlm_most_frequent_baseline']:.4f})",
      f"pretrain | cpc accuracy: {s['cpc_accuracy']:.4f} "
      f"(chance: {s['cpc_chance']:.4f}, length-only baseline: "
      f"{s['cpc_length_baseline']:.4f})",
      f"pretrain | cpc picks of the masked sentence's length: "
      f"{s['cpc_same_length_rate']:.4f}; cpc accuracy among them: "
      f"{s['cpc_accuracy_within_length']:.4f} (length-only baseline: "
      f"{s['cpc_length_baseline']:.4f})",
      f"pretrain | wall time: {summary['seconds']['total']:.0f} s (data "
      f"{summary['seconds']['data']:.0f} s, train "
      f"{summary['seconds']['train']:.0f} s, eval "
      f"{summary['seconds']['eval']:.0f} s)",
  ]


def main(argv: List[str]) -> None:
  preprocess_flags.check_command_line(argv, ())
  common.quiet_logging()
  f = flags.FLAGS
  summary = run_demo(f.output_dir, seed=f.seed, train_steps=f.train_steps,
                     gin_files=f.gin_file, gin_bindings=f.gin_bindings,
                     max_documents=f.max_documents)
  print("\n".join(summary_lines(summary)), flush=True)


if __name__ == "__main__":
  # Flags only when run as a binary: other demos define the same names.
  flags.DEFINE_string("output_dir", "pretrain_demo",
                      "Where data, model and results go.")
  flags.DEFINE_integer("seed", 0, "Data split, shuffle and masking seed.")
  flags.DEFINE_integer("train_steps", TRAIN_STEPS, "Optimizer steps.")
  flags.DEFINE_integer("max_documents", None,
                       "Use the corpus's first documents only (a quick "
                       "look; default all).")
  cli.run(main)
