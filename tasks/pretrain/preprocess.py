r"""Caches pre-training examples: raw text -> sharded TFRecords + a stats JSON.

  python -m tasks.pretrain.preprocess --input='corpus/*.txt,more/*.txt.gz' \
      --vocab=vocab.txt --output_dir=DATA [--num_shards=64] \
      [--eval_fraction=0.01] [--min_sentences=7] [--seed=0] [--strict]
  python -m tasks.pretrain.preprocess --tfds_name=wikipedia/20230601.en \
      --tfds_split=train --tfds_data_dir=~/tensorflow_datasets \
      --spm_model=30k-clean.model --output_dir=DATA

reads documents (`data.py`: BERT's format, one sentence per line, a blank
line between documents; or `tfds_dataset.py`: a TFDS text dataset, split
into sentences without downloads), drops documents with fewer than
`--min_sentences` sentences (7, as the ETC paper), assigns each document to
the held-out `eval` split with probability `--eval_fraction` (by a hash of
its text and the seed, so duplicates land together), cuts documents into
examples at sentence boundaries (`features.py`) and writes

  DATA/train-SSSSS-of-NNNNN.tfrecord   examples, round-robin over shards
  DATA/eval-00000-of-00001.tfrecord
  DATA/pretrain.stats.json

The stats: documents read / used / filtered and why, bad input skipped
(per reason, each named by file and line), examples, tokens and sentences
per split, what cutting dropped, CPC-eligible sentences, the vocabulary's
[MASK] and special ids, and the training split's most frequent wordpiece
with its frequency (the MLM baseline of `--mode=eval`). `PretrainTask.
train_stats_file` reads it. The output is deterministic given the inputs,
the flags and `--seed`; files are written all or nothing (a failure, e.g.
the first bad line under `--strict`, leaves no output). No masks are
stored: the task's input pipeline draws them (`masking.py`).

With `--input`, the binary runs as an Apache Beam pipeline (`PretrainPipeline`,
`tasks.common.pipeline.beam_pipeline`; Beam's pipeline options pass through).
Its outputs do not depend on the runner or the workers: the same examples and
stats; a training example's shard is then a hash of its position in the input
(not round-robin), so with several shards each holds a different (equally sized
on average) subset than a single-process run's.
"""

import collections
import dataclasses
import os
import zlib
from typing import (Any, Dict, Iterable, Iterator, List, Optional,
                    Sequence, Tuple)

from absl import flags
import numpy as np
import tensorflow as tf

from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError
from tasks.common import output_files as output_files_lib
from tasks.common.command_line import beam_binary
from tasks.common.command_line import beam_options
from tasks.common.command_line import output_dirs
from tasks.common.command_line import preprocess_flags
from tasks.common.featurization import tokenization
from tasks.common.inputs import input_files
from tasks.common.inputs import record_stats
from tasks.common.pipeline import beam_pipeline
from tasks.common.pipeline import pipeline_task
from tasks.common.pipeline import preprocessing
from tasks.pretrain import data
from tasks.pretrain import features as features_lib
from tasks.pretrain import masking

STATS_FILE = "pretrain.stats.json"
SPLITS = ("train", "eval")
TOO_FEW_SENTENCES = "too_few_sentences"
NO_EXAMPLE = "no_example"
# Documents tokenized per TF call.
_DOC_BATCH = 64

# Vocabulary entries never masked, when present (padding is never masked
# anyway); and the [MASK] entry.
SPECIAL_TOKENS = {tokenization.WORDPIECE: ("[PAD]", "[CLS]", "[SEP]",
                                           "[MASK]"),
                  tokenization.SENTENCEPIECE: ("<pad>", "[CLS]", "[SEP]",
                                               "[MASK]")}
MASK_TOKEN = "[MASK]"


@dataclasses.dataclass
class Settings:
  """What decides the output besides the input (recorded in the stats)."""
  min_sentences: int = features_lib.DEFAULT_MIN_SENTENCES
  eval_fraction: float = 0.01
  num_shards: int = 1
  seed: int = 0
  # The CPC sentence lengths counted in the stats: the masking's defaults.
  cpc_min_sentence_len: int = masking.MaskingConfig.cpc_min_sentence_len
  cpc_max_sentence_len: int = masking.MaskingConfig.cpc_max_sentence_len
  max_documents: Optional[int] = None

  def __post_init__(self):
    if self.min_sentences < 1:
      raise UserInputError("--min_sentences must be positive")
    if not 0.0 <= self.eval_fraction < 1.0:
      raise UserInputError(f"--eval_fraction must be in [0, 1), got "
                           f"{self.eval_fraction}")
    if self.num_shards < 1:
      raise UserInputError("--num_shards must be positive")


def vocabulary_info(tokenizer: tokenization.Tokenizer,
                    mask_token_id: Optional[int] = None) -> Dict[str, Any]:
  """The vocabulary facts the task needs: kind, size, [MASK] id, special
  ids (never masked).

  Raises:
    UserInputError: no [MASK] entry and no `mask_token_id`.
  """
  if mask_token_id is None:
    mask_token_id = tokenizer.token_id(MASK_TOKEN)
  if mask_token_id is None:
    raise UserInputError(
        f"{getattr(tokenizer, 'vocab_path', None) or tokenizer.model_path}: "
        f"no {MASK_TOKEN} entry; pass --mask_token_id")
  special = sorted({i for i in (tokenizer.token_id(t) for t in
                                SPECIAL_TOKENS[tokenizer.kind])
                    if i is not None} | {int(mask_token_id)})
  return {"kind": tokenizer.kind, "size": tokenizer.vocab_size,
          "mask_token_id": int(mask_token_id), "special_token_ids": special}


def split_of(sentences: List[str], settings: Settings) -> str:
  """"eval" for about `eval_fraction` of the documents (by a hash of the
  seed and the text), else "train"."""
  if settings.eval_fraction <= 0:
    return "train"
  key = f"{settings.seed}\n" + "\n".join(sentences)
  draw = zlib.crc32(key.encode("utf-8")) / 2**32
  return "eval" if draw < settings.eval_fraction else "train"


def shard_paths(output_dir: str, split: str, num_shards: int) -> List[str]:
  return [os.path.join(output_dir,
                       f"{split}-{i:05d}-of-{num_shards:05d}.tfrecord")
          for i in range(num_shards)]


def output_files(output_dir: str, settings: Settings) -> Dict[str, List[str]]:
  """split -> its shards' paths."""
  return {"train": shard_paths(output_dir, "train", settings.num_shards),
          "eval": shard_paths(output_dir, "eval", 1)}


class PretrainStep(preprocessing.RecordStep[data.Document]):
  """A document -> its examples (cut at sentence boundaries) in its split
  (`split_of`); dropped when it has too few sentences or gives no example."""

  def __init__(self, featurizer: features_lib.PretrainFeaturizer,
               settings: Settings):
    super().__init__(featurizer)
    self.settings = settings

  def process(self, document: data.Document) -> preprocessing.Outcome:
    if len(document.sentences) < self.settings.min_sentences:
      return preprocessing.Dropped(TOO_FEW_SENTENCES)
    return self._cut(document, self.featurizer.tokenize(document.sentences))

  def process_all(self, items: Iterable[data.Document]
                  ) -> Iterator[Tuple[data.Document, preprocessing.Outcome]]:
    """`process` of each document, tokenizing `_DOC_BATCH` documents per TF
    call."""
    batch: List[data.Document] = []
    for document in items:
      batch.append(document)
      if len(batch) == _DOC_BATCH:
        yield from self._process_batch(batch)
        batch = []
    yield from self._process_batch(batch)

  def _process_batch(self, batch: List[data.Document]
                     ) -> Iterator[Tuple[data.Document, preprocessing.Outcome]]:
    long_enough = [len(d.sentences) >= self.settings.min_sentences
                   for d in batch]
    sentences = [s for d, ok in zip(batch, long_enough) if ok
                 for s in d.sentences]
    rows = iter(self.featurizer.tokenize(sentences))
    for document, ok in zip(batch, long_enough):
      if not ok:
        yield document, preprocessing.Dropped(TOO_FEW_SENTENCES)
        continue
      pieces = [next(rows) for _ in document.sentences]
      yield document, self._cut(document, pieces)

  def _cut(self, document: data.Document, pieces: List[np.ndarray]
           ) -> preprocessing.Outcome:
    examples, dropped = self.featurizer.examples(pieces)
    if not examples:
      return preprocessing.Dropped(NO_EXAMPLE)
    return preprocessing.Featurized(examples, dropped,
                                    split_of(document.sentences,
                                    self.settings))


class PretrainSink(preprocessing.ExampleSink):
  """Writes each split's examples (train round-robin over its shards) and
  counts documents, examples, tokens, sentences and wordpieces per split."""

  def __init__(self, stats: record_stats.RecordStats,
               spec: tfrecords.FeatureSpec, output_dir: str,
               settings: Settings, vocab_size: int, files: Any = None):
    """`files`: a pipeline's collector instead of `output_dir`'s shards."""
    super().__init__(stats, spec, files or output_files(output_dir,
                                                        settings))
    self.settings = settings
    self.filtered = collections.Counter()
    self.documents = collections.Counter()
    self.examples = collections.Counter()
    self.tokens = collections.Counter()
    self.sentences = collections.Counter()
    self.cpc_eligible = collections.Counter()
    self.truncation = collections.Counter()
    # The training split's wordpiece counts (the MLM baseline).
    self.token_counts = np.zeros([vocab_size], np.int64)

  def drop(self, record: data.Document, reason: str) -> None:
    del record  # Unused.
    self.filtered[reason] += 1

  def num_written(self) -> int:
    return sum(self.documents.values())

  def dropped_counts(self):
    return self.filtered

  def add(self, record: data.Document,
          featurized: preprocessing.Featurized) -> None:
    del record  # Unused.
    split = featurized.split
    self.documents[split] += 1
    self.truncation.update(featurized.amounts)
    for example in featurized.examples:
      lengths = features_lib.sentence_lengths(example)
      real = example["token_ids"][:int(lengths.sum())]
      self.examples[split] += 1
      self.tokens[split] += len(real)
      self.sentences[split] += len(lengths)
      self.cpc_eligible[split] += int(np.sum(
          (lengths >= self.settings.cpc_min_sentence_len) &
          (lengths <= self.settings.cpc_max_sentence_len)))
      if split == "train":
        size = len(self.token_counts)
        self.token_counts += np.bincount(real, minlength=size)[:size]
      self.write(example, split)

  def most_frequent(self, special_ids: Sequence[int],
                    vocab: Optional[Sequence[str]]) -> Optional[Dict[str, Any]]:
    """The training split's most frequent wordpiece besides `special_ids`
    (its id, piece, count and frequency among all pieces); None when no
    token was written."""
    counts = self.token_counts.copy()
    special = np.array(special_ids, np.int64)
    counts[special[special < len(counts)]] = 0
    if not counts.sum():
      return None
    top = int(np.argmax(counts))
    return {"id": top, "piece": vocab[top] if vocab is not None else None,
            "count": int(counts[top]),
            "frequency": float(counts[top] / self.token_counts.sum())}


def _at_most(documents: Iterable[data.Document], limit: Optional[int]
             ) -> Iterator[data.Document]:
  """The first `limit` documents (all when None)."""
  read = 0
  for document in documents:
    if limit is not None and read >= limit:
      return
    read += 1
    yield document


def preprocess_documents(documents: Iterable[data.Document],
                         featurizer: features_lib.PretrainFeaturizer,
                         output_dir: str,
                         settings: Settings,
                         stats: record_stats.RecordStats,
                         vocabulary: Dict[str, Any],
                         source: Any = None) -> Dict[str, Any]:
  """Filters, splits, cuts and writes documents (see the module docstring).

  Args:
    documents: the reader's documents (bad input already counted in
      `stats`).
    featurizer: tokenizer and lengths.
    output_dir: where the shards and the stats go (created).
    settings: filtering, split, shards, seed, CPC lengths.
    stats: the reader's bad-input stats (the skipped part of the output).
    vocabulary: `vocabulary_info(...)`.
    source: what was read (patterns, TFDS name), for the stats.

  Returns:
    The stats dict (also written to `output_dir/pretrain.stats.json`).

  Raises:
    input_errors.BadRecordError: in strict mode, the first bad input (nothing is
      left in `output_dir`).
    preprocessing.NothingWrittenError: no document gave an example (nothing
      is left in `output_dir`).
  """
  output_dirs.check_output_dir(output_dir)
  with output_files_lib.writing(output_dir):
    tf.io.gfile.makedirs(output_dir)
  step = PretrainStep(featurizer, settings)
  sink = PretrainSink(
      stats, step.feature_spec(), output_dir, settings,
      max(vocabulary["size"], featurizer.tokenizer.vocab_size))
  preprocessing.run(_at_most(documents, settings.max_documents), step, sink)
  result = _stats_json(sink, featurizer, settings, stats, vocabulary, source)
  output_files_lib.write_json(os.path.join(output_dir, STATS_FILE), result)
  return result


def _stats_json(sink: PretrainSink,
                featurizer: features_lib.PretrainFeaturizer,
                settings: Settings, stats: record_stats.RecordStats,
                vocabulary: Dict[str, Any], source: Any) -> Dict[str, Any]:
  """The stats of a run (`STATS_FILE`)."""
  def per_split(counter: Dict[str, int]) -> Dict[str, int]:
    return {split: counter[split] for split in SPLITS}

  return {
      "source": source,
      "settings": dict(dataclasses.asdict(settings),
                       long_seq_len=featurizer.long_seq_len,
                       global_seq_len=featurizer.global_seq_len,
                       max_sentence_len=featurizer.max_sentence_len,
                       global_token_id=featurizer.global_token_id),
      "strict": stats.strict,
      "lines_or_records_read": stats.examples_read,
      "documents": {
          "read": sum(sink.documents.values()) + sum(sink.filtered.values()),
          "used": sum(sink.documents.values()),
          "filtered": dict(sorted(sink.filtered.items())),
          **per_split(sink.documents),
      },
      "skipped": dict(sorted(stats.skipped.items())),
      "skipped_records": list(stats.skipped_records),
      "examples": per_split(sink.examples),
      "tokens": per_split(sink.tokens),
      "sentences": per_split(sink.sentences),
      "cpc_eligible_sentences": per_split(sink.cpc_eligible),
      "truncation": dict(sorted(sink.truncation.items())),
      "vocabulary": vocabulary,
      "most_frequent_wordpiece": sink.most_frequent(
          vocabulary["special_token_ids"],
          getattr(featurizer.tokenizer, "vocab", None)),
      "outputs": {split: sink.files.paths[split] for split in SPLITS},
  }


@dataclasses.dataclass
class PretrainPipeline(pipeline_task.PipelineTask):
  """`preprocess_documents` over text files as a Beam pipeline
  (`beam_pipeline.run`): the same outputs. All files are one group (one
  stats JSON, one set of shards); each file is read by one worker.

  Attributes:
    featurizer_args: `features.PretrainFeaturizer`'s arguments.
    settings: filtering, split, shards, seed, CPC lengths.
    inputs: the patterns given (the stats name them).
    max_line_chars: `data.read_documents`'.
    mask_token_id: `vocabulary_info`'s.
  """
  featurizer_args: Dict[str, Any]
  settings: Settings
  inputs: List[str]
  max_line_chars: int = data.DEFAULT_MAX_LINE_CHARS
  mask_token_id: Optional[int] = None
  strict: bool = False

  def make_featurizer(self) -> features_lib.PretrainFeaturizer:
    return features_lib.PretrainFeaturizer(**self.featurizer_args)

  def units(self, files):
    # The first documents of the files in order: one reader for them all.
    if self.settings.max_documents is not None:
      return [tuple(files)]
    return list(files)

  def group_of(self, unit):
    return "pretrain"

  def read(self, unit, stats, work_dir):
    del work_dir  # Unused.
    files = list(unit) if isinstance(unit, tuple) else [unit]
    return _at_most(data.read_documents(files, stats, self.max_line_chars),
                    self.settings.max_documents)

  def make_step(self, featurizer, unit) -> PretrainStep:
    return PretrainStep(featurizer, self.settings)

  def make_sink(self, featurizer, group, files) -> PretrainSink:
    vocabulary = vocabulary_info(featurizer.tokenizer, self.mask_token_id)
    return PretrainSink(
        record_stats.RecordStats(input_file=",".join(self.inputs),
                                 strict=self.strict),
        featurizer.feature_spec(), "", self.settings,
        max(vocabulary["size"], featurizer.tokenizer.vocab_size), files)

  def outputs(self, group):
    return {split: [os.path.basename(p) for p in paths]
            for split, paths in output_files("", self.settings).items()}

  def write_reports(self, featurizer, results, work_dir, output_dir):
    sink = results["pretrain"].sink
    result = _stats_json(
        sink, featurizer, self.settings, sink.stats,
        vocabulary_info(featurizer.tokenizer, self.mask_token_id),
        {"input": list(self.inputs)})
    output_files_lib.write_json(os.path.join(work_dir, STATS_FILE), result)
    return [summary_line(result)]


def summary_line(result: Dict[str, Any]) -> str:
  """What the binary prints."""
  docs = result["documents"]
  return (f"documents: read {docs['read']}, used {docs['used']} (train "
          f"{docs['train']}, eval {docs['eval']}), filtered "
          f"{docs['filtered']}; skipped {result['skipped']}; examples "
          f"{result['examples']}; tokens {result['tokens']}")


def _define_flags():
  """Flags only when run as a binary (the training binaries define flags of
  the same names)."""
  flags.DEFINE_list("input", None,
                    "Text files in BERT's format (globs, comma-separated; "
                    "gzip files are decompressed).")
  flags.DEFINE_string("tfds_name", None,
                      "A TFDS text dataset instead of --input, e.g. "
                      "wikipedia/20230601.en or wiki40b/en.")
  flags.DEFINE_string("tfds_split", "train", "Its split.")
  flags.DEFINE_string("tfds_data_dir", None, "Its data_dir.")
  flags.DEFINE_string("tfds_manual_dir", None,
                      "Its manual_dir (with --tfds_download).")
  flags.DEFINE_bool("tfds_download", False,
                    "Run TFDS download_and_prepare first.")
  flags.DEFINE_string("tfds_text_feature", "text", "Its text feature.")
  preprocess_flags.define_featurizer_flags(global_seq_len=512)
  flags.DEFINE_integer("min_sentences", features_lib.DEFAULT_MIN_SENTENCES,
                       "Documents with fewer sentences are dropped (the "
                       "ETC paper: 7).")
  flags.DEFINE_integer("max_line_chars", data.DEFAULT_MAX_LINE_CHARS,
                       "Longer lines are bad input.")
  flags.DEFINE_float("eval_fraction", 0.01,
                     "Share of documents held out for evaluation.")
  flags.DEFINE_integer("num_shards", 1, "Train TFRecord shards.")
  flags.DEFINE_integer("seed", 0, "Seed of the train/eval assignment.")
  flags.DEFINE_integer("max_sentence_len", None,
                       "Longer sentences are cut (default long_seq_len).")
  flags.DEFINE_integer("global_token_id",
                       features_lib.DEFAULT_GLOBAL_TOKEN_ID,
                       "Id of the sentence summary tokens (original: 1).")
  flags.DEFINE_integer("mask_token_id", None,
                       "Id of [MASK] (default: the vocabulary's entry).")
  flags.DEFINE_integer("cpc_min_sentence_len", 2,
                       "Shortest sentence CPC may mask (for the stats; set "
                       "MaskingConfig.cpc_min_sentence_len alike).")
  flags.DEFINE_integer("cpc_max_sentence_len", 64,
                       "Longest sentence CPC may mask (for the stats; set "
                       "MaskingConfig.cpc_max_sentence_len alike).")
  flags.DEFINE_integer("max_documents", None,
                       "Read at most this many documents (a quick run).")


def main(argv):
  beam_args = beam_binary.check_command_line(
      argv, ("output_dir",), one_of=("input", "tfds_name"))
  f = flags.FLAGS
  settings = Settings(
      min_sentences=f.min_sentences, eval_fraction=f.eval_fraction,
      num_shards=f.num_shards, seed=f.seed,
      cpc_min_sentence_len=f.cpc_min_sentence_len,
      cpc_max_sentence_len=f.cpc_max_sentence_len,
      max_documents=f.max_documents)
  featurizer_args = dict(
      vocab_path=f.vocab, spm_model_path=f.spm_model,
      lower_case=f.lower_case, long_seq_len=f.long_seq_len,
      global_seq_len=f.global_seq_len, global_token_id=f.global_token_id,
      max_sentence_len=f.max_sentence_len)
  if f.input:
    # Fail on a missing input before loading the vocabulary.
    files = input_files.match_files(f.input)
    task = PretrainPipeline(featurizer_args, settings, list(f.input),
                            f.max_line_chars, f.mask_token_id, f.strict)
    beam_pipeline.run_and_print(task, files, f.output_dir, beam_args)
    return
  beam_options.pipeline_options_from(beam_args)
  featurizer = features_lib.PretrainFeaturizer(**featurizer_args)
  vocabulary = vocabulary_info(featurizer.tokenizer, f.mask_token_id)
  # A TFDS dataset is read by one reader: the single-process path.
  from tasks.pretrain import tfds_dataset  # pylint: disable=g-import-not-at-top
  stats = record_stats.RecordStats(input_file=f.tfds_name, strict=f.strict)
  documents = tfds_dataset.read_documents(
      f.tfds_name, f.tfds_split, stats, data_dir=f.tfds_data_dir,
      manual_dir=f.tfds_manual_dir, download=f.tfds_download,
      text_feature=f.tfds_text_feature)
  source = {"tfds_name": f.tfds_name, "tfds_split": f.tfds_split}
  result = preprocess_documents(documents, featurizer, f.output_dir,
                                settings, stats, vocabulary, source)
  print(summary_line(result))


if __name__ == "__main__":
  _define_flags()
  beam_binary.run_binary(main)
