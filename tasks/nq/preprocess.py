r"""Caches NQ windows: released jsonl(.gz) files -> TFRecords + stats JSON.

  python -m tasks.nq.preprocess --input='nq/dev/nq-dev-??.jsonl.gz' \
      --vocab=vocab.txt --output_dir=DIR [--is_training] [--strict] \
      [--long_seq_len=4096 --global_seq_len=230 --stride=2048 \
       --max_question_len=32] [--include_unknown_rate=1.0 \
       --include_unknown_rate_for_unanswerable=...] [--seed=0] \
      [--num_shards=1] [Beam pipeline options]

For every input file (a glob or comma-separated list; full or simplified
format, gzipped or not) writes `DIR/<stem>.tfrecord` (with `--num_shards=N`:
`DIR/<stem>-00000-of-0000N.tfrecord`, ...; one `tf.train.Example` per kept
window, the features of `features.feature_spec`) and
`DIR/<stem>.stats.json`; `DIR/nq_stats.json` sums them. Stats: examples
read / written / skipped per reason with the list of skipped records (file,
example id or line, field, reason), windows written (per answer type),
windows downsampled, question wordpieces dropped, candidates left without a
global token. Bad lines and records are skipped unless `--strict`, which
fails on the first one (the partial output file is removed). An
`example_id` given twice in a file refuses it (naming both lines) unless
`--skip_duplicate_ids`, which keeps the first and counts the others as
`duplicate_id`; a run that writes no example (e.g. a file of another task)
fails.

`--is_training` (default: on when the file name contains "train") requires
annotations and downsamples windows whose answer type is null: each is kept
with probability `--include_unknown_rate` (default 1.0 = keep all, the
original's default), or `--include_unknown_rate_for_unanswerable` (default
min(1, 4 x the former), the original's) when the example itself has no
answer. The draw is seeded per example (`--seed`, the file name and the
example id), so a rerun, on any runner and any number of workers, keeps the
same windows. Dev files keep every window.

`--tfds=NAME:SPLIT` reads a TFDS dataset instead, once its features are
checked: the TFDS `natural_questions` builder lacks the long-answer
candidates and byte offsets, so it fails at once with the list of missing
fields and what to download (`tasks/nq/tfds_dataset.py`).

The features come from `NqFeaturizer`'s in-graph code (the ops a serving
signature runs), one document at a time (`NqStep`); `NqSink` counts and
downsamples the windows. The binary runs it as an Apache Beam pipeline
(`NqPipeline`, `tasks.common.pipeline.beam_pipeline`): Beam's pipeline options
(`--runner`, `--direct_num_workers`, ...) pass through; the outputs do not
depend on them.
"""

import collections
import dataclasses
import os
import random
from typing import Any, Dict, List, Optional, Sequence, Union

from absl import flags
from absl import logging
import tensorflow as tf

from etc_realformer import cli
from etc_realformer.errors import UserInputError
from tasks.common import output_files
from tasks.common.command_line import beam_binary
from tasks.common.command_line import beam_options
from tasks.common.command_line import output_dirs
from tasks.common.command_line import preprocess_flags
from tasks.common.inputs import input_files
from tasks.common.inputs import record_stats
from tasks.common.pipeline import beam_pipeline
from tasks.common.pipeline import pipeline_task
from tasks.common.pipeline import preprocessing
from tasks.nq import data
from tasks.nq import features as features_lib
from tasks.nq import tfds_dataset


@dataclasses.dataclass
class NqStats(record_stats.RecordStats):
  """`RecordStats` plus window counts (one input file, or a sum)."""
  is_training: bool = False
  windows_written: int = 0
  # A Counter: summed when a pipeline merges its workers' counts.
  windows_by_answer_type: Dict[str, int] = dataclasses.field(
      default_factory=lambda: collections.Counter(
          {t: 0 for t in data.ANSWER_TYPES}))
  windows_downsampled: int = 0
  settings: Dict[str, Any] = dataclasses.field(default_factory=dict)

  def add(self, other: "NqStats") -> None:
    """Adds another file's counts (for the summary)."""
    self.examples_read += other.examples_read
    self.examples_written += other.examples_written
    self.examples_truncated += other.examples_truncated
    for key, value in other.truncation.items():
      self.truncation[key] += value
    for key, value in other.skipped.items():
      self.skipped[key] += value
    self.skipped_records.extend(other.skipped_records)
    self.windows_written += other.windows_written
    for key, value in other.windows_by_answer_type.items():
      self.windows_by_answer_type[key] += value
    self.windows_downsampled += other.windows_downsampled

  def to_dict(self) -> Dict[str, Any]:
    out = super().to_dict()
    skipped = out.pop("skipped_records")
    out.update(is_training=self.is_training,
               windows_written=self.windows_written,
               windows_by_answer_type=dict(self.windows_by_answer_type),
               windows_downsampled=self.windows_downsampled,
               settings=dict(self.settings),
               skipped_records=skipped)
    return out


def output_paths(input_path: str, output_dir: str):
  """(tfrecord path, stats path), e.g. nq-dev-00.jsonl.gz -> nq-dev-00.*."""
  stem = os.path.basename(input_path)
  for suffix in (".gz", ".jsonl", ".json"):
    if stem.endswith(suffix):
      stem = stem[:-len(suffix)]
  return preprocessing.output_paths(input_path, output_dir, stem=stem)


def unanswerable_rate(include_unknown_rate: float,
                      include_unknown_rate_for_unanswerable: Optional[float]
                      ) -> float:
  if include_unknown_rate_for_unanswerable is None:
    return min(1.0, 4.0 * include_unknown_rate)
  return include_unknown_rate_for_unanswerable


class NqStep(preprocessing.RecordStep[data.NqRecord]):
  """An NQ record -> its windows (one example each) and the featurizer's
  amounts (`features.FEATURIZER_STATS`)."""

  def __init__(self, featurizer: features_lib.NqFeaturizer,
               predict_la_when_no_sa: bool = False):
    super().__init__(featurizer)
    self.predict_la_when_no_sa = predict_la_when_no_sa

  def process(self, record: data.NqRecord) -> preprocessing.Featurized:
    windows, amounts = self.featurizer.featurize_record(
        record, self.predict_la_when_no_sa)
    return preprocessing.Featurized(
        [{k: v[w] for k, v in windows.items()}
         for w in range(amounts["windows"])], amounts)


class NqSink(preprocessing.ExampleSink):
  """Writes an NQ file's windows and counts them (`NqStats`); in training,
  keeps each null window with the example's rate.

  The draws come from a generator seeded per example (`seed` and the example
  id), so that the same windows are kept whatever order or worker the
  examples are featurized in.
  """

  def __init__(self, stats: NqStats, spec, files: Union[str, Any],
               rate_answerable: float, rate_unanswerable: float,
               seed: str, predict_la_when_no_sa: bool = False):
    """`files`: the TFRecord path, or a pipeline's collector."""
    super().__init__(stats, spec,
                     {"": [files]} if isinstance(files, str) else files)
    self.rate_answerable = rate_answerable
    self.rate_unanswerable = rate_unanswerable
    self.seed = seed
    self.predict_la_when_no_sa = predict_la_when_no_sa

  def add(self, record: data.NqRecord,
          featurized: preprocessing.Featurized) -> None:
    stats, amounts = self.stats, featurized.amounts
    example_type = data.labels_of(record,
                                  self.predict_la_when_no_sa).answer_type
    rate = (self.rate_unanswerable if example_type == data.NULL
            else self.rate_answerable)
    stats.add_truncation({
        "question_tokens_dropped": amounts["question_tokens_dropped"],
        "candidates_without_global_token":
            amounts["candidates_without_global_token"]})
    # Counted, but no truncation of the example.
    for key in ("windows_global_full", "tokens_outside_top_level_candidates"):
      stats.truncation[key] += amounts[key]
    stats.examples_written += 1
    rng = random.Random(f"{self.seed}:{record.example_id}")
    for window in featurized.examples:
      answer_type = int(window["answer_type"])
      if (stats.is_training and answer_type == data.NULL and
          rng.random() >= rate):
        stats.windows_downsampled += 1
        continue
      stats.windows_written += 1
      if answer_type >= 0:
        stats.windows_by_answer_type[data.ANSWER_TYPES[answer_type]] += 1
      self.write(window)


def check_rates(include_unknown_rate: float,
                include_unknown_rate_for_unanswerable: Optional[float]
                ) -> None:
  """Raises `UserInputError` for a rate outside [0, 1]."""
  for name, rate in (("include_unknown_rate", include_unknown_rate),
                     ("include_unknown_rate_for_unanswerable",
                      include_unknown_rate_for_unanswerable)):
    if rate is not None and not 0.0 <= rate <= 1.0:
      raise UserInputError(f"{name} must be in [0, 1], got {rate}")


def make_sink(featurizer: features_lib.NqFeaturizer, input_path: str,
              files: Union[str, Any], is_training: bool, strict: bool,
              include_unknown_rate: float,
              include_unknown_rate_for_unanswerable: Optional[float],
              seed: int, predict_la_when_no_sa: bool) -> NqSink:
  """The sink of one input file, with its `NqStats` and settings."""
  rate_answerable = include_unknown_rate
  rate_unanswerable = unanswerable_rate(include_unknown_rate,
                                        include_unknown_rate_for_unanswerable)
  stats = NqStats(input_file=input_path, strict=strict,
                  is_training=is_training)
  stats.settings = dict(
      long_seq_len=featurizer.long_seq_len,
      global_seq_len=featurizer.global_seq_len, stride=featurizer.stride,
      max_question_len=featurizer.max_question_len,
      include_unknown_rate=rate_answerable if is_training else 1.0,
      include_unknown_rate_for_unanswerable=(
          rate_unanswerable if is_training else 1.0),
      seed=seed, predict_la_when_no_sa=predict_la_when_no_sa)
  return NqSink(stats, featurizer.feature_spec(), files, rate_answerable,
                rate_unanswerable, f"{seed}:{os.path.basename(input_path)}",
                predict_la_when_no_sa)


def preprocess_file(input_path: str,
                    output_dir: str,
                    featurizer: features_lib.NqFeaturizer,
                    is_training: Optional[bool] = None,
                    strict: bool = False,
                    include_unknown_rate: float = 1.0,
                    include_unknown_rate_for_unanswerable: Optional[float]
                    = None,
                    seed: int = 0,
                    predict_la_when_no_sa: bool = False,
                    read_fn=None) -> NqStats:
  """Featurizes one NQ file into `output_dir`; returns its stats.

  `read_fn(stats, require_labels)` replaces the file reader (e.g. records
  from TFDS); `input_path` then only names the outputs and the stats.

  Raises:
    input_errors.InputFileError: the input is unreadable, corrupt or empty.
    input_errors.BadRecordError: in strict mode, the first bad line or record.
    UserInputError: a rate outside [0, 1].
  """
  is_training = preprocessing.is_training_file(input_path, is_training)
  if read_fn is None:
    def read_fn(stats, require_labels):
      return data.read_records(input_path, stats=stats,
                               require_labels=require_labels)
  check_rates(include_unknown_rate, include_unknown_rate_for_unanswerable)
  output_dirs.check_output_dir(output_dir)
  with output_files.writing(output_dir):
    tf.io.gfile.makedirs(output_dir)
  record_path, stats_path = output_paths(input_path, output_dir)
  step = NqStep(featurizer, predict_la_when_no_sa)
  sink = make_sink(featurizer, input_path, record_path, is_training, strict,
                   include_unknown_rate,
                   include_unknown_rate_for_unanswerable, seed,
                   predict_la_when_no_sa)
  stats = sink.stats
  preprocessing.run(read_fn(stats, is_training), step, sink)
  stats.write_json(stats_path)
  logging.info("%s: read %d, wrote %d examples / %d windows to %s, "
               "downsampled %d, skipped %d %s", input_path,
               stats.examples_read, stats.examples_written,
               stats.windows_written, record_path, stats.windows_downsampled,
               stats.num_skipped, dict(stats.skipped))
  return stats


def preprocess(inputs: Sequence[str] | str, output_dir: str,
               featurizer: features_lib.NqFeaturizer, **kwargs
               ) -> NqStats:
  """`preprocess_file` for every file matching `inputs`; writes and returns
  the summed stats (`DIR/nq_stats.json`, with each file's in `files`)."""
  paths = input_files.match_files(inputs)
  per_file = [preprocess_file(path, output_dir, featurizer, **kwargs)
              for path in paths]
  return write_summary(paths, per_file, output_dir,
                       bool(kwargs.get("strict", False)))


def write_summary(paths: Sequence[str], file_stats: Sequence[NqStats],
                  output_dir: str, strict: bool) -> NqStats:
  """Writes and returns the sum of the files' stats (`DIR/nq_stats.json`,
  with each file's in `files`)."""
  total = NqStats(input_file=",".join(paths), strict=strict)
  per_file: List[Dict[str, Any]] = []
  for path, stats in zip(paths, file_stats):
    total.is_training = stats.is_training
    total.settings = stats.settings
    total.add(stats)
    per_file.append(dict(input_file=path,
                         examples_written=stats.examples_written,
                         windows_written=stats.windows_written,
                         examples_skipped=stats.num_skipped))
  summary = total.to_dict()
  summary["files"] = per_file
  output_files.write_json(os.path.join(output_dir, "nq_stats.json"), summary)
  return total


def preprocess_tfds(name_and_split: str, output_dir: str,
                    featurizer: features_lib.NqFeaturizer,
                    data_dir: Optional[str] = None, **kwargs) -> NqStats:
  """`preprocess_file` over a TFDS split ("NAME:SPLIT") whose features have
  every field of `tfds_dataset.REQUIRED_FIELDS`.

  Raises:
    tfds_dataset.TfdsFieldsMissingError: they do not (the TFDS
      natural_questions builder), before anything is downloaded or written.
  """
  # Imported here: TFDS takes seconds to import and only --tfds needs it.
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  name, _, split = name_and_split.partition(":")
  if not split:
    raise UserInputError(f"--tfds needs NAME:SPLIT, got {name_and_split!r}")
  builder = tfds_dataset.check_tfds_builder(name, data_dir=data_dir)
  label = f"{name}-{split}"

  def read_fn(stats, require_labels):
    examples = tfds.as_numpy(builder.as_dataset(split=split))
    return tfds_dataset.records_from_tfds(examples, label, stats=stats,
                                          require_labels=require_labels)

  return preprocess_file(label, output_dir, featurizer, read_fn=read_fn,
                         **kwargs)


@dataclasses.dataclass
class NqPipeline(pipeline_task.LabelledTrainingFiles,
                 pipeline_task.PipelineTask):
  """`preprocess` as a Beam pipeline (`beam_pipeline.run`): the same files,
  per input file `DIR/<stem>.tfrecord` + `DIR/<stem>.stats.json`, and
  `DIR/nq_stats.json`.

  Attributes:
    featurizer_args: `make_featurizer`'s arguments.
    is_training ... predict_la_when_no_sa: `preprocess_file`'s.
    num_shards: TFRecord files per input file (`pipeline_task.shard_names`).
  """
  featurizer_args: Dict[str, Any]
  is_training: Optional[bool] = None
  strict: bool = False
  skip_duplicate_ids: bool = False
  include_unknown_rate: float = 1.0
  include_unknown_rate_for_unanswerable: Optional[float] = None
  seed: int = 0
  predict_la_when_no_sa: bool = False
  num_shards: int = 1
  read_records = staticmethod(data.read_records)

  def __post_init__(self):
    if self.num_shards < 1:
      raise UserInputError("--num_shards must be positive")
    check_rates(self.include_unknown_rate,
                self.include_unknown_rate_for_unanswerable)

  def make_featurizer(self) -> features_lib.NqFeaturizer:
    return make_featurizer(**self.featurizer_args)

  def make_step(self, featurizer, unit) -> NqStep:
    return NqStep(featurizer, self.predict_la_when_no_sa)

  def make_sink(self, featurizer, group, files) -> NqSink:
    return make_sink(featurizer, group, files, self.is_training_file(group),
                     self.strict, self.include_unknown_rate,
                     self.include_unknown_rate_for_unanswerable, self.seed,
                     self.predict_la_when_no_sa)

  def outputs(self, group):
    return {"": pipeline_task.shard_names(
        os.path.basename(output_paths(group, "")[0]), self.num_shards)}

  def write_reports(self, featurizer, results, work_dir, output_dir):
    paths = pipeline_task.in_input_order(results)
    file_stats = [results[p].sink.stats for p in paths]
    for path, stats in zip(paths, file_stats):
      stats.write_json(output_paths(path, work_dir)[1])
    total = write_summary(paths, file_stats, work_dir, self.strict)
    return [summary_line(",".join(paths), total)]


def summary_line(inputs: str, stats: NqStats) -> str:
  """What the binary prints."""
  return (f"{inputs}: read {stats.examples_read}, written "
          f"{stats.examples_written} examples / {stats.windows_written} "
          f"windows, downsampled {stats.windows_downsampled}, skipped "
          f"{stats.num_skipped} {dict(stats.skipped)}")


def make_featurizer(vocab: Optional[str], spm_model: Optional[str],
                    long_seq_len: int = 4096, global_seq_len: int = 230,
                    stride: int = 2048, max_question_len: int = 32,
                    lower_case: bool = True,
                    token_ids: Optional[List[str]] = None
                    ) -> features_lib.NqFeaturizer:
  ids = features_lib.NqTokenIds.from_flag(token_ids, "token_ids")
  return features_lib.NqFeaturizer(
      vocab_path=vocab, spm_model_path=spm_model, long_seq_len=long_seq_len,
      global_seq_len=global_seq_len, stride=stride,
      max_question_len=max_question_len, token_ids=ids,
      lower_case=lower_case)


def _define_flags():
  """Flags only when run as a binary (training binaries define the same
  names)."""
  flags.DEFINE_string("input", None,
                      "NQ jsonl(.gz) files: a glob or comma-separated list.")
  flags.DEFINE_string(
      "tfds", None,
      "NAME:SPLIT of a TFDS dataset instead of --input. Its features are "
      "checked first: the TFDS natural_questions builder lacks the long-"
      "answer candidates and byte offsets, and fails with what to download.")
  flags.DEFINE_string("tfds_data_dir", None, "TFDS data_dir.")
  preprocess_flags.define_featurizer_flags(
      global_seq_len=230, long_seq_len_help="Long input length (window).")
  preprocess_flags.define_duplicate_ids_flag()
  flags.DEFINE_bool("is_training", None,
                    "Training file: require annotations and downsample null "
                    "windows (default: file name contains 'train').")
  flags.DEFINE_integer("stride", 2048, "Window stride in wordpieces.")
  flags.DEFINE_integer("max_question_len", 32, "Question wordpieces kept.")
  flags.DEFINE_float("include_unknown_rate", 1.0,
                     "Training: probability of keeping a null window.")
  flags.DEFINE_float("include_unknown_rate_for_unanswerable", None,
                     "Training: the same for examples without any answer "
                     "(default min(1, 4 x include_unknown_rate)).")
  flags.DEFINE_integer("seed", 0, "Downsampling seed.")
  flags.DEFINE_integer("num_shards", 1,
                       "TFRecord files per input file: 1 writes "
                       "DIR/<stem>.tfrecord, N DIR/<stem>-00000-of-0000N."
                       "tfrecord ... (train on their glob).")
  flags.DEFINE_bool("predict_la_when_no_sa", False,
                    "Short-answer labels = the long answer when there is no "
                    "short answer (an option of the original).")
  flags.DEFINE_list(
      "token_ids", None,
      f"{','.join(features_lib.NqTokenIds.names())} ids; default: the "
      "original's, [CLS],[SEP],[unused102],[unused103],[CLS],35,1,0 "
      "(WordPiece) / <unused_63>,<unused_2>,<unused_35>,<unused_36>,"
      "<unused_63>,35,1,0 (SentencePiece), looked up by name.")


def main(argv):
  beam_args = beam_binary.check_command_line(argv, ("output_dir",),
                                             one_of=("input", "tfds"))
  f = flags.FLAGS
  # The files first: a missing one fails before the vocabulary is loaded.
  inputs = input_files.match_files(f.input) if f.input else None
  featurizer_args = dict(stride=f.stride, max_question_len=f.max_question_len,
                         token_ids=f.token_ids,
                         **preprocess_flags.featurizer_flag_values())
  kwargs = dict(
      is_training=f.is_training, strict=f.strict,
      include_unknown_rate=f.include_unknown_rate,
      include_unknown_rate_for_unanswerable=(
          f.include_unknown_rate_for_unanswerable),
      seed=f.seed, predict_la_when_no_sa=f.predict_la_when_no_sa)
  if f.tfds:
    # A TFDS split is read by one reader: the single-process path.
    beam_options.pipeline_options_from(beam_args)
    stats = preprocess_tfds(f.tfds, f.output_dir,
                            make_featurizer(**featurizer_args),
                            data_dir=f.tfds_data_dir, **kwargs)
    print(summary_line(f.tfds, stats))
    return
  task = NqPipeline(featurizer_args, num_shards=f.num_shards,
                    skip_duplicate_ids=f.skip_duplicate_ids, **kwargs)
  beam_pipeline.run_and_print(task, inputs, f.output_dir, beam_args)


if __name__ == "__main__":
  _define_flags()
  beam_binary.run_binary(main)
