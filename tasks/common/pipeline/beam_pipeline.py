"""The preprocess skeleton as an Apache Beam pipeline: any runner, any
number of workers, the same outputs.

  read units (files) -> Reshuffle -> read + validate (the task's reader)
  -> Reshuffle (spread uneven pages; not when every local worker has a
     file of its own: `spreads_records`)
  -> featurize (`RecordStep`, built once per worker in `DoFn.setup`)
  -> count (`ExampleSink`), serialize, and write part files (`sorted_parts`:
     one per bundle and output file, in the work folder)
  -> shards: GroupByKey of the parts' names per output file, the parts
     merged in key order into the file (the examples themselves never pass
     through the runner's shuffle)
  -> stats: CombineGlobally of the per-bundle counts, to the work folder
  -> on success only: the stats JSONs, then every file moved to the output
     folder (a failed pipeline leaves the output folder as it was), and the
     files an earlier run of the same outputs left there removed (fewer
     shards than before: `tfrecord_shards.remove_stale_shards`).

The work folder is `<output_dir>.tmp-<host>-<pid>-<random>`: removed when the
run ends, fails, or is stopped by SIGTERM or Ctrl-C (`beam_binary.Stopped`: exit
code 128 + the signal's number); a folder a killed run (kill -9) left is removed
by the next run over the same output once its process is gone
(`work_dirs.remove_stale_work_dirs`; a live run's is left alone). A run that
wrote no example fails (`preprocessing.NothingWrittenError`), as does one that
repeats an id (`input_errors.DuplicateIdError`, unless the task's
`skip_duplicate_ids`).

What makes the outputs independent of the runner and the worker count:

- each example carries a sort key (read unit, record, example within the
  record); a shard is written in that order, and an example's shard is a
  hash of its key, so a one-shard output is byte for byte the single-process
  file (the order evaluation files are matched in);
- counts are sums (`merge_counts`); the skipped-record lists are put back
  in input order (the reader's, then the step's, by record);
- under strict, the pipeline counts bad records like any run and the driver
  then fails on the first one in input order: the same one-line error as
  the single-process path, whichever worker saw it first.

Beam's `WriteToTFRecord` is not used for the shards: it does not order a
shard's records, and the single-process order is a contract of the
evaluation files. Line-based reads stay the tasks' readers (not
`ReadFromText`): gzip files are not splittable anyway, and the readers
name bad lines by number, which the stats must keep.

A task gives the pipeline a `PipelineTask` (picklable: flag values and
paths only); its binary calls `beam_binary.run_binary(main)` so that the flags
absl does not know pass to Beam (`beam_options.pipeline_options_from`), and
`run_and_print` from its `main`.
"""

import contextlib
import dataclasses
import importlib
import logging as std_logging
import os
import pickle
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple
import uuid
import zlib

import tensorflow as tf

from tasks.common import output_files
from tasks.common.command_line import beam_binary
from tasks.common.command_line import beam_options
from tasks.common.command_line import output_dirs
from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.common.pipeline import pipeline_task
from tasks.common.pipeline import preprocessing
from tasks.common.pipeline import sorted_parts
from tasks.common.pipeline import tfrecord_shards
from tasks.common.pipeline import work_dirs

with contextlib.ExitStack() as _quiet:
  # Beam's import warns about cloud clients it does not need here (one line
  # each on stderr, where a binary's errors must be one line).
  std_logging.disable(std_logging.WARNING)
  _quiet.callback(std_logging.disable, std_logging.NOTSET)
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  from apache_beam.runners import runner as beam_runner  # pylint: disable=g-import-not-at-top
  from apache_beam.transforms import window as beam_window  # pylint: disable=g-import-not-at-top


# Records a graph step featurizes per `process_all` call (one trace each).
_BATCH = 256


# Where the pipeline leaves the combined counts for the driver.
_STATES_FILE = "_pipeline_states.pkl"


# The work folder's folder of part files (`sorted_parts`).
_PARTS = "_parts"


# ------------------------------------------------------------------ DoFns
class _Read(beam.DoFn):
  """(unit index, unit) -> ("record", (unit index, record index, unit,
  record)) ... and ("state", (group, GroupResult of the reader))."""

  def __init__(self, task: pipeline_task.PipelineTask, work_dir: str):
    self.task = task
    self.work_dir = work_dir

  def process(self, element):
    index, unit = element
    group = self.task.group_of(unit)
    stats = record_stats.RecordStats(
        input_file=str(unit), strict=False,
        skip_duplicate_ids=self.task.skip_duplicate_ids)
    result = pipeline_task.GroupResult(reader_stats=[(index, stats)])
    try:
      for number, record in enumerate(
          self.task.read(unit, stats, self.work_dir)):
        yield "record", (index, number, unit, record)
    except input_errors.InputFileError as e:
      result.input_errors.append((index, str(e)))
    yield "state", (group, result)


class _Featurize(beam.DoFn):
  """Records -> per bundle, ("part", (file name, (part file, in order)))
  for each output file it wrote examples of (`sorted_parts`, in the work
  folder's `_PARTS`), and ("state", (group, GroupResult)) with its
  counts."""

  def __init__(self, task: pipeline_task.PipelineTask, work_dir: str):
    self.task = task
    self.parts_dir = os.path.join(work_dir, _PARTS)

  def setup(self):
    self.featurizer = self.task.make_featurizer()
    self.steps: Dict[Any, preprocessing.RecordStep] = {}

  def start_bundle(self):
    self.results: Dict[str, pipeline_task.GroupResult] = {}
    self.pending: List[Tuple[int, int, Any, Any]] = []
    self.parts: Dict[str, sorted_parts.PartWriter] = {}

  def _step(self, unit) -> preprocessing.RecordStep:
    key = repr(unit)
    if key not in self.steps:
      self.steps[key] = self.task.make_step(self.featurizer, unit)
    return self.steps[key]

  def process(self, element):
    step = self._step(element[2])
    self.pending.append(element)
    # A step that featurizes one record at a time gains nothing by waiting.
    batched = type(step).process_all is not preprocessing.RecordStep.process_all
    if not batched or len(self.pending) >= _BATCH:
      self._flush()

  def finish_bundle(self):
    self._flush()
    for name, part in self.parts.items():
      part.close()
      yield beam_window.GlobalWindows.windowed_value(
          ("part", (name, (part.path, part.in_order))))
    for group, result in self.results.items():
      result.sink.files = None  # The examples went out; only counts remain.
      yield beam_window.GlobalWindows.windowed_value(("state",
                                                      (group, result)))

  def _flush(self) -> None:
    by_unit: Dict[str, List[Tuple[int, int, Any, Any]]] = {}
    for element in self.pending:
      by_unit.setdefault(repr(element[2]), []).append(element)
    self.pending = []
    for elements in by_unit.values():
      self._featurize(elements)

  def _part(self, name: str) -> sorted_parts.PartWriter:
    """The bundle's part file of output file `name` (a unique name: a
    retried bundle's parts are never merged)."""
    if name not in self.parts:
      tf.io.gfile.makedirs(self.parts_dir)
      self.parts[name] = sorted_parts.PartWriter(os.path.join(
          self.parts_dir, f"{name}.{uuid.uuid4().hex}"))
    return self.parts[name]

  def _featurize(self, elements) -> None:
    unit = elements[0][2]
    group = self.task.group_of(unit)
    result = self.results.get(group)
    if result is None:
      sink = self.task.make_sink(self.featurizer, group,
                                 pipeline_task.Collector({}))
      result = self.results[group] = pipeline_task.GroupResult(sink=sink)
    sink, outputs = result.sink, self.task.outputs(group)
    outcomes = self._step(unit).process_all([e[3] for e in elements])
    for (index, number, _, _), (record, outcome) in zip(elements, outcomes):
      if isinstance(outcome, input_errors.BadRecordError):
        result.step_skips.append(((index, number, 0), outcome.to_dict()))
        continue
      if isinstance(outcome, preprocessing.Dropped):
        sink.drop(record, outcome.reason)
        continue
      sink.add(record, outcome)
      for j, (split, serialized) in enumerate(sink.files.items):
        key = (index, number, j)
        self._part(shard_of(outputs[split], key)).write(key, serialized)
      sink.files.items = []


def shard_of(names: Sequence[str], key: pipeline_task.SortKey) -> str:
  """The shard an example goes to: a hash of its sort key (the same on any
  worker)."""
  if len(names) == 1:
    return names[0]
  return names[zlib.crc32(repr(key).encode()) % len(names)]


class _WriteShard(beam.DoFn):
  """(file name, [(part file, in order)]) -> the file in the work folder,
  the parts' examples merged in key order (the parts removed)."""

  def __init__(self, work_dir: str):
    self.work_dir = work_dir

  def process(self, element):
    name, parts = element
    sorted_parts.merge(sorted(parts), os.path.join(self.work_dir, name))
    yield name


class _MergeResults(beam.CombineFn):
  """(group, GroupResult) ... -> {group: GroupResult}, summed."""

  def create_accumulator(self):
    return {}

  def add_input(self, accumulator, element):
    group, result = element
    if group in accumulator:
      accumulator[group].merge(result)
    else:
      accumulator[group] = result
    return accumulator

  def merge_accumulators(self, accumulators):
    merged = {}
    for accumulator in accumulators:
      for item in accumulator.items():
        self.add_input(merged, item)
    return merged

  def extract_output(self, accumulator):
    return accumulator


def _save_states(states: Dict[str, pipeline_task.GroupResult],
                 work_dir: str) -> None:
  with tf.io.gfile.GFile(os.path.join(work_dir, _STATES_FILE), "wb") as f:
    f.write(pickle.dumps(states))


# ---------------------------------------------------------------- pipeline
def build(p: beam.Pipeline,
          task: pipeline_task.PipelineTask,
          files: Sequence[str],
          work_dir: str,
          spread_records: bool = True) -> None:
  """Adds the pipeline of `task` over `files` to `p`, writing into
  `work_dir` (the shards, the per-unit files, the counts).

  `spread_records`: reshuffle the records between reading and featurizing,
  so that the pages of one file spread over the workers. It costs every
  record encoded and decoded (a third of the throughput on NQ pages);
  without it the runner fuses reading and featurizing into one stage
  (`spreads_records` decides).
  """
  units = list(enumerate(task.units(files)))
  read = (p | "Units" >> beam.Create(units)
          | "SpreadUnits" >> beam.Reshuffle()
          | "Read" >> beam.ParDo(_Read(task, work_dir)))
  records_ = (read
              | "Records" >> beam.Filter(lambda kv: kv[0] == "record")
              | "RecordValues" >> beam.Map(lambda kv: kv[1]))
  if spread_records:
    records_ = records_ | "SpreadRecords" >> beam.Reshuffle()
  featurized = records_ | "Featurize" >> beam.ParDo(
      _Featurize(task, work_dir))
  _ = (featurized
       | "Parts" >> beam.Filter(lambda kv: kv[0] == "part")
       | "PartValues" >> beam.Map(lambda kv: kv[1])
       | "ByShard" >> beam.GroupByKey()
       | "WriteShards" >> beam.ParDo(_WriteShard(work_dir)))
  is_state = lambda kv: kv[0] == "state"
  # The reader's and the featurizer's states are each picked out before the
  # two meet: a Flatten of `read` itself would encode every parsed record to
  # feed it.
  _ = ((read | "ReaderStates" >> beam.Filter(is_state),
        featurized | "FeaturizerStates" >> beam.Filter(is_state))
       | "States" >> beam.Flatten()
       | "StateValues" >> beam.Map(lambda kv: kv[1])
       | "Combine" >> beam.CombineGlobally(_MergeResults())
       | "SaveStates" >> beam.Map(_save_states, work_dir))


def run(task: pipeline_task.PipelineTask, files: Sequence[str], output_dir: str,
        beam_args: Sequence[str] = (),
        spread_records: Optional[bool] = None
        ) -> Tuple[Dict[str, pipeline_task.GroupResult], List[str]]:
  """Runs the task's pipeline; on success moves its outputs and stats JSONs
  into `output_dir`. Returns the groups' results and the lines to print.
  `spread_records`: `build`'s; None: `spreads_records` decides.

  Raises:
    UserInputError: a bad pipeline option or runner (before anything runs).
    input_errors.InputFileError: an input file cannot be read (the first one).
    input_errors.BadRecordError: under strict, the first bad record in input
      order; `output_dir` is left untouched.
  """
  options = beam_options.pipeline_options_from(beam_args)
  task = importable(task)
  featurizer = task.make_featurizer()  # A bad vocabulary fails here, once.
  output_dir = output_dir.rstrip("/") or "/"
  output_dirs.check_output_dir(output_dir)
  work_dirs.remove_stale_work_dirs(output_dir)
  work_dir = work_dirs.work_dir_of(output_dir)
  try:
    with beam_binary._stop_signals_raise():
      with output_files.writing(work_dir):
        tf.io.gfile.makedirs(work_dir)
      with _quiet_beam_logs():
        with beam.Pipeline(runner=beam_options.local_runner(options),
                           options=options) as p:
          if spread_records is None:
            spread_records = beam_options.spreads_records(
                options, len(task.units(files)))
          build(p, task, files, work_dir, spread_records=spread_records)
      with tf.io.gfile.GFile(os.path.join(work_dir, _STATES_FILE), "rb") as f:
        results: Dict[str, pipeline_task.GroupResult] = pickle.loads(f.read())
      tf.io.gfile.remove(os.path.join(work_dir, _STATES_FILE))
      if tf.io.gfile.exists(os.path.join(work_dir, _PARTS)):
        # Parts of bundles a runner retried: their outputs were not used.
        tf.io.gfile.rmtree(os.path.join(work_dir, _PARTS))
      for group in results:
        _complete(task, featurizer, group, results[group], work_dir,
                  output_dir)
      _check(task, results)
      with output_files.writing(work_dir):
        lines = task.write_reports(featurizer, results, work_dir, output_dir)
      _move_all(work_dir, output_dir)
      tfrecord_shards.remove_stale_shards([
          os.path.join(output_dir, name) for group in results
          for names in task.outputs(group).values() for name in names])
  finally:
    if tf.io.gfile.exists(work_dir):
      tf.io.gfile.rmtree(work_dir)
  return results, lines


def run_and_print(task: pipeline_task.PipelineTask, files: Sequence[str],
                  output_dir: str, beam_args: Sequence[str] = ()) -> None:
  """`run`, then what a preprocess binary prints: the task's report lines
  (one summary per output group, `PipelineTask.write_reports`)."""
  _, lines = run(task, files, output_dir, beam_args)
  print("\n".join(lines))


def _check(task: pipeline_task.PipelineTask,
           results: Dict[str, pipeline_task.GroupResult]) -> None:
  """The failure a single-process run would have: an unreadable input (or
  a repeated id), under strict the first bad record, or an output without
  any example."""
  errors = sorted(e for r in results.values() for e in r.input_errors)
  if errors:
    raise input_errors.InputFileError(errors[0][1])
  if task.strict:
    for group in pipeline_task.in_input_order(results):
      error = results[group].first_bad_record()
      if error is not None:
        raise error
  for group in pipeline_task.in_input_order(results):
    sink = results[group].sink
    if not sink.num_written():
      raise preprocessing.nothing_written_error(
          sink.stats.input_file or group, sink.stats.examples_read,
          sink.stats.skipped, sink.dropped_counts())


def importable(value: Any) -> Any:
  """`value` with the classes a binary defined in `__main__` (its task, its
  settings) taken from the binary's module by name instead.

  Worker processes cannot import `__main__.NqSink`: a task of `__main__`
  would make sinks and stats that do not pickle there. Dataclass instances
  are rebuilt field by field; anything else is returned as it is.
  """
  if not dataclasses.is_dataclass(value) or isinstance(value, type):
    return value
  fields = {f.name: importable(getattr(value, f.name))
            for f in dataclasses.fields(value) if f.init}
  cls = type(value)
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  if cls.__module__ == "__main__" and spec is not None:
    cls = getattr(importlib.import_module(spec.name), cls.__name__)
  return cls(**fields)


def _complete(task: pipeline_task.PipelineTask, featurizer: Any, group: str,
              result: pipeline_task.GroupResult, work_dir: str,
              output_dir: str) -> None:
  """A group's sink with its final output paths (an empty one when no
  record was featurized), and its empty shards written."""
  outputs = task.outputs(group)
  if result.sink is None:
    result.sink = task.make_sink(featurizer, group, pipeline_task.Collector({}))
  result.stats()
  result.sink.stats.strict = task.strict
  result.sink.files = pipeline_task.Collector({
      split: [os.path.join(output_dir, n) for n in names]
      for split, names in outputs.items()})
  for names in outputs.values():
    for name in names:
      path = os.path.join(work_dir, name)
      if not tf.io.gfile.exists(path):
        with tf.io.TFRecordWriter(path):
          pass


def _move_all(work_dir: str, output_dir: str) -> None:
  with output_files.writing(output_dir):
    tf.io.gfile.makedirs(output_dir)
  for name in tf.io.gfile.listdir(work_dir):
    with output_files.writing(os.path.join(output_dir, name)):
      tf.io.gfile.rename(os.path.join(work_dir, name),
                         os.path.join(output_dir, name), overwrite=True)


@contextlib.contextmanager
def _quiet_beam_logs():
  """Beam's progress logs (info, some on the root logger; warnings on its
  own) would reach a binary's stderr, where its errors must be one line;
  so would its log of an error a transform raised (a full disk), which
  the run raises anyway."""
  logger = std_logging.getLogger("apache_beam")
  level = logger.level
  logger.setLevel(std_logging.CRITICAL)
  std_logging.disable(std_logging.INFO)
  try:
    yield
  finally:
    std_logging.disable(std_logging.NOTSET)
    logger.setLevel(level)
