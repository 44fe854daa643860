"""The preprocess skeleton every task fills.

Every task's `preprocess.py` turns a raw file into a TFRecord cache the same
way:

  records            the task's reader (`data.read_records`): validated;
                     unusable ones counted in the stats
                     (`record_stats.RecordStats`)
  -> RecordStep      one record -> its `Outcome`: `Featurized` examples,
                     `Dropped` (left out by design), or a `BadRecordError`
  -> ExampleSink     counts what is kept and writes its examples
                     (`tfrecord_shards.TFRecordShards`: all or nothing)
  -> the stats JSON

`run` is that loop, written once: a bad record is skipped and counted per
reason, or, under `strict`, fails the run and leaves no output behind.
`RecordStep.process` is a plain function of one record (what an Apache Beam
`DoFn` calls); `RecordStep.process_all` gives the same outcomes for many
records, faster: `GraphStep` runs an in-graph featurizer over many records
as a parallel, ordered `tf.data` map (`RecordFnStep`: the featurizer's
`record_fn`). A task fills the skeleton with its
step (and, when its records give several examples or outputs, its sink);
`featurize_file` / `featurize_into` run the default sink into one file and
write the stats.

Also shared by the binaries (their flags and command-line checks are
`tasks.common.command_line.preprocess_flags`):

- `output_paths`: `DIR/<stem>.tfrecord`, `DIR/<stem>.stats.json`, ...;
- `default_is_training` / `is_training_file`: the "file name holds 'train'"
  default of `--is_training`;
- `read_file`: a file's valid records and its stats so far;
- `ordered_map`: a deterministic parallel `tf.data` map;
- `log_written` / `summary_line`: the log line and the printed summary.

What a run must not do quietly, checked here for every task:

- write nothing: a run whose records were all skipped or dropped (a file of
  another task, binary garbage) fails (`NothingWrittenError`, naming what
  was read and the top skip reasons) and leaves no output;
- mix runs: once an output is written, the files of the same output family an
  earlier run left (`train-*-of-00004` beside a new `-of-00002`) are removed
  (`tfrecord_shards.remove_stale_shards`), so that the documented glob reads
  this run's examples only;
- fail unnamed: an output that cannot be written (under a regular file, a full
  disk, no permission) is an `output_files.OutputFileError` naming the path, and
  the partial files are removed.
"""

import abc
import collections
import dataclasses
import os
from typing import (Any, Callable, Dict, Generic, Iterable, Iterator, List,
                    Mapping, Optional, Sequence, Tuple, TypeVar, Union)

from absl import logging
import tensorflow as tf

from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError
from tasks.common import output_files
from tasks.common.command_line import output_dirs
from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.common.pipeline import tfrecord_shards


R = TypeVar("R")  # A task's validated record.


Features = Dict[str, Any]


# ------------------------------------------------------------------ outcomes
@dataclasses.dataclass(frozen=True)
class Featurized:
  """A kept record: its examples and what was cut to fit.

  Attributes:
    examples: the feature dicts to write (one per record in most tasks; NQ:
      one per window; pre-training: one per piece of the document).
    amounts: what was cut to fit, by name (task-specific); a record with
      any amount above 0 counts as truncated.
    split: the output its examples go to ("": the one file; pre-training:
      "train" or "eval").
  """
  examples: Sequence[Features]
  amounts: Mapping[str, int] = dataclasses.field(default_factory=dict)
  split: str = ""


@dataclasses.dataclass(frozen=True)
class Dropped:
  """A record left out by design, e.g. a document too short to learn from:
  counted by reason, never a failure (unlike a `BadRecordError`)."""
  reason: str


Outcome = Union[Featurized, Dropped, input_errors.BadRecordError]


class NothingWrittenError(UserInputError):
  """A run wrote no example: every record was skipped or dropped (most often
  a file of another task or format)."""


def nothing_written_error(name: str, read: int,
                          skipped: Mapping[str, int],
                          dropped: Mapping[str, int] = ()
                          ) -> NothingWrittenError:
  """The error of a run over `name` that wrote no example: how many records
  were read, and the top reasons they were skipped or dropped."""
  reasons = collections.Counter(skipped)
  reasons.update(dict(dropped))
  top = ", ".join(f"{reason} {count}" for reason, count in
                  reasons.most_common(3))
  why = f"skipped or dropped: {top}" if top else "no record was usable"
  if len(reasons) > 3:
    why += f", and {len(reasons) - 3} more reasons"
  return NothingWrittenError(
      f"{name}: no example written: read {read} records, {why} (is it a "
      f"file of this task?)")


# ---------------------------------------------------------------------- steps
class RecordStep(abc.ABC, Generic[R]):
  """A task's per-record step: a validated record -> its `Outcome`.

  `featurizer` is the task's featurizer; its `feature_spec` is the
  examples'.
  """

  def __init__(self, featurizer: Any):
    self.featurizer = featurizer

  def feature_spec(self) -> tfrecords.FeatureSpec:
    """The features of the examples (how they are serialized)."""
    return self.featurizer.feature_spec()

  @abc.abstractmethod
  def process(self, record: R) -> Outcome:
    """One record's outcome, a plain function of the record.

    A bad record's `BadRecordError` is returned, not raised: the caller's
    policy decides (`run`: skip and count, or fail under strict).
    """

  def process_all(self, items: Iterable[R]) -> Iterator[Tuple[R, Outcome]]:
    """(record, `process(record)`) for each record, in order.

    Subclasses may batch or parallelize; the outcomes stay those of
    `process`.
    """
    for record in items:
      yield record, self.process(record)


class GraphStep(RecordStep[R]):
  """A step whose featurizer is graph code: record -> `to_inputs` ->
  `featurize` -> `finish`.

  `process` featurizes one record eagerly; `process_all` runs `featurize`
  over many records as a parallel, ordered `tf.data` map (the records are
  read first, so that a bad one fails a strict run before any TF work), and
  over fewer than `dataset_min_records` one `process` call at a time.
  """

  # The `tf.TensorSpec`s of `to_inputs`' values: a dict (passed to
  # `featurize` as it is) or a tuple.
  input_signature: Any = None
  # A `tf.data` map costs about a second to set up on every call (it
  # instantiates and optimizes the featurizer's whole function for its own
  # runtime); calling the traced featurizer record by record has no such
  # cost. Measured on 2 cores with OpenKP's featurizer: 64 records 1.2 s
  # over tf.data, 0.17 s one by one; 600 records 2.9 s and 2.7 s. Beam
  # bundles and small files stay below this; large single-process files
  # keep the parallel map.
  dataset_min_records: int = 256

  def __init__(self, featurizer: Any, input_file: str):
    """The step of one input file (named in the errors)."""
    super().__init__(featurizer)
    self.input_file = input_file

  @abc.abstractmethod
  def to_inputs(self, record: R) -> Any:
    """The featurizer's inputs of a record, matching `input_signature`."""

  @abc.abstractmethod
  def featurize(self, inputs: Any
                ) -> Tuple[Mapping[str, tf.Tensor], Mapping[str, tf.Tensor]]:
    """Inputs (tensors) -> (features, amounts cut to fit), graph code."""

  def finish(self, record: R, features: Features,
             amounts: Dict[str, int]) -> Outcome:
    """A featurized record's outcome: labels, checks (a `BadRecordError`
    to skip it). By default it is kept as one example."""
    del record  # Unused.
    return Featurized([features], amounts)

  def process(self, record: R) -> Outcome:
    inputs = _to_tensors(self.to_inputs(record), self.input_signature)
    features, amounts = self.featurize(inputs)
    return self.finish(record, {k: v.numpy() for k, v in features.items()},
                       {k: int(v) for k, v in amounts.items()})

  def process_all(self, items: Iterable[R]) -> Iterator[Tuple[R, Outcome]]:
    valid = list(items)
    if len(valid) < self.dataset_min_records:
      yield from super().process_all(valid)
      return
    ds = tf.data.Dataset.from_generator(
        lambda: (self.to_inputs(r) for r in valid),
        output_signature=self.input_signature)
    fn = self.featurize if isinstance(self.input_signature, dict) else (
        lambda *args: self.featurize(args))
    for record, (features, amounts) in zip(
        valid, ordered_map(ds, fn).as_numpy_iterator()):
      yield record, self.finish(record, features,
                                {k: int(v) for k, v in amounts.items()})


class RecordFnStep(GraphStep[R]):
  """A `GraphStep` whose graph code is the featurizer's `record_fn`: a
  `tf.function` with an input signature, the ops serving runs too.
  `to_inputs` gives its positional arguments, in order.
  """

  def __init__(self, featurizer: Any, input_file: str):
    super().__init__(featurizer, input_file)
    # The featurizer's own signature, so that the two cannot drift apart.
    self.input_signature = tuple(featurizer.record_fn.input_signature)

  def featurize(self, inputs):
    return self.featurizer.record_fn(*inputs)


def _to_tensors(values: Any, signature: Any) -> Any:
  """`values` (a dict or tuple of Python values) as tensors of `signature`."""
  def convert(value, spec: tf.TensorSpec) -> tf.Tensor:
    shape = [-1 if d is None else d for d in spec.shape.as_list()]
    return tf.reshape(tf.constant(value, spec.dtype), shape)

  if isinstance(signature, dict):
    return {k: convert(values[k], spec) for k, spec in signature.items()}
  return tuple(convert(v, spec) for v, spec in zip(values, signature))


class ExampleSink:
  """Counts the kept records and writes their examples, all or nothing.

  By default each kept record counts as one written example with its
  amounts (`RecordStats.examples_written`, `add_truncation`). A task whose
  records give several examples or drop some overrides `add` / `drop`.
  """

  def __init__(self, stats: record_stats.RecordStats,
               spec: tfrecords.FeatureSpec, paths: Mapping[str, Sequence[str]]):
    """Opens the outputs.

    Args:
      stats: the input's stats (the reader's counts already in).
      spec: the feature spec of the examples.
      paths: split -> its shards' paths (`TFRecordShards`), or an object
        with `TFRecordShards`' `write`, `commit`, `abort` and `paths` that
        takes the examples instead (a pipeline's collector).
    """
    self.stats = stats
    self.spec = spec
    self.files = paths if hasattr(
        paths, "write") else tfrecord_shards.TFRecordShards(paths)

  def add(self, record: Any, featurized: Featurized) -> None:
    """Counts a kept record and writes its examples."""
    del record  # Unused.
    self.stats.add_truncation(dict(featurized.amounts))
    self.stats.examples_written += 1
    for example in featurized.examples:
      self.write(example, featurized.split)

  def num_written(self) -> int:
    """The records whose examples were written (0: the run failed)."""
    return self.stats.examples_written

  def dropped_counts(self) -> Mapping[str, int]:
    """The records left out by design, by reason (the default drops
    none)."""
    return {}

  def drop(self, record: Any, reason: str) -> None:
    """Counts a record left out by design (no step of the default drops)."""
    del record  # Unused.
    raise ValueError(f"{type(self).__name__} does not count dropped records "
                     f"({reason})")

  def write(self, example: Features, split: str = "") -> None:
    # Deterministic: the features map's order otherwise differs between
    # processes (hash seeds), so a worker's bytes would differ from another's.
    self.files.write(
        tfrecords.to_tf_example(example, self.spec).SerializeToString(
            deterministic=True), split)


# ------------------------------------------------------------------ skeleton
def run(items: Iterable[R], step: RecordStep[R], sink: ExampleSink) -> None:
  """Featurizes records into the sink: the skeleton of every task.

  Each record's outcome is counted and written (`sink.add`), counted as
  dropped (`sink.drop`), or, when bad, skipped and counted by reason
  (`sink.stats.handle_bad_record`). The outputs are committed once all
  records are done.

  Raises:
    input_errors.BadRecordError: under strict (`sink.stats.strict`), the first
      bad record, from the reader or the step; nothing is left written.
    NothingWrittenError: no record was written (`check_written`); nothing
      is left written.
  """
  try:
    for record, outcome in step.process_all(items):
      if isinstance(outcome, input_errors.BadRecordError):
        sink.stats.handle_bad_record(outcome)
      elif isinstance(outcome, Dropped):
        sink.drop(record, outcome.reason)
      else:
        sink.add(record, outcome)
    check_written(sink)
  except BaseException:
    sink.files.abort()
    raise
  sink.files.commit()


def check_written(sink: ExampleSink) -> None:
  """A run must write something: raises `NothingWrittenError` (what was
  read, why it was skipped) when `sink` wrote no record."""
  if not sink.num_written():
    stats = sink.stats
    raise nothing_written_error(stats.input_file or "input",
                                stats.examples_read, stats.skipped,
                                sink.dropped_counts())


def featurize_file(items: Iterable[R], step: RecordStep[R],
                   stats: record_stats.RecordStats, record_path: str,
                   stats_path: str) -> record_stats.RecordStats:
  """`run` into one TFRecord file with the default sink, then the stats JSON
  and the log line; returns `stats`."""
  sink = ExampleSink(stats, step.feature_spec(), {"": [record_path]})
  run(items, step, sink)
  with output_files.writing(stats_path):
    stats.write_json(stats_path)
  log_written(stats.input_file, record_path, stats)
  return stats


def featurize_into(output_dir: str, items: Iterable[R], step: RecordStep[R],
                   stats: record_stats.RecordStats) -> record_stats.RecordStats:
  """`featurize_file` into `output_dir` (created if missing): the
  `output_paths` of `stats.input_file`, e.g. DIR/dev.tfrecord and
  DIR/dev.stats.json."""
  output_dirs.check_output_dir(output_dir)
  with output_files.writing(output_dir):
    tf.io.gfile.makedirs(output_dir)
  record_path, stats_path = output_paths(stats.input_file, output_dir)
  return featurize_file(items, step, stats, record_path, stats_path)


# --------------------------------------------------------------- CLI helpers
def output_paths(input_path: str, output_dir: str,
                 suffixes: Sequence[str] = ("tfrecord", "stats.json"),
                 stem: Optional[str] = None) -> tuple:
  """`DIR/<stem>.<suffix>` for each suffix; `stem` defaults to the input's
  file name without its extension (dev.json -> dev)."""
  if stem is None:
    stem = os.path.splitext(os.path.basename(input_path))[0]
  return tuple(os.path.join(output_dir, f"{stem}.{s}") for s in suffixes)


def default_is_training(input_path: str) -> bool:
  """Training files are those whose name holds "train" (any case)."""
  return "train" in os.path.basename(input_path).lower()


def is_training_file(input_path: str,
                     is_training: Optional[bool] = None) -> bool:
  """`is_training` (an `--is_training` flag's value), or when it is None
  `default_is_training`."""
  if is_training is None:
    return default_is_training(input_path)
  return is_training


def read_file(read_records: Callable[..., Iterable[R]], input_path: str,
              strict: bool = False, **reader_args: Any
              ) -> Tuple[List[R], record_stats.RecordStats]:
  """The valid records of a file, read by the task's reader
  (`read_records(input_path, stats=..., **reader_args)`), and its stats so
  far (reads, skips).

  Raises:
    input_errors.InputFileError: the input is missing, empty or malformed.
    input_errors.BadRecordError: in strict mode, the first bad record.
  """
  stats = record_stats.RecordStats(input_file=input_path, strict=strict)
  return list(read_records(input_path, stats=stats, **reader_args)), stats


def ordered_map(ds: tf.data.Dataset, fn: Callable) -> tf.data.Dataset:
  """`ds.map(fn)` in parallel, with outputs in input order."""
  options = tf.data.Options()
  options.deterministic = True
  return ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE).with_options(
      options)


def log_written(input_path: str, record_path: str,
                stats: record_stats.RecordStats) -> None:
  logging.info("%s: read %d, wrote %d to %s, truncated %d, skipped %d %s",
               input_path, stats.examples_read, stats.examples_written,
               record_path, stats.examples_truncated, stats.num_skipped,
               dict(stats.skipped))


def summary_line(input_path: str, stats: record_stats.RecordStats) -> str:
  """What a preprocessing binary prints for one input file."""
  return (f"{input_path}: read {stats.examples_read}, written "
          f"{stats.examples_written}, truncated {stats.examples_truncated}, "
          f"skipped {stats.num_skipped} {dict(stats.skipped)}")
