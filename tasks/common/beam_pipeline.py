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
     shards than before: `preprocessing.remove_stale_shards`).

The work folder is `<output_dir>.tmp-<host>-<pid>-<random>`: removed when
the run ends, fails, or is stopped by SIGTERM or Ctrl-C (`Stopped`: exit
code 128 + the signal's number); a folder a killed
run (kill -9) left is removed by the next run over the same output once its
process is gone (`remove_stale_work_dirs`; a live run's is left alone).
A run that wrote no example fails (`preprocessing.NothingWrittenError`),
as does one that repeats an id (`records.DuplicateIdError`, unless the
task's `skip_duplicate_ids`).

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
paths only); its binary calls `run_binary(main)` so that the flags absl does
not know pass to Beam (`pipeline_options`).
"""

import abc
import collections
import contextlib
import dataclasses
import difflib
import importlib
import logging as std_logging
import os
import pickle
import re
import signal
import socket
import sys
import threading
import uuid
import zlib
from typing import (Any, Callable, Dict, Iterable, List, Optional,
                    Sequence, Tuple)

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from etc_realformer import cli
from etc_realformer.errors import UserInputError
from tasks.common import preprocessing
from tasks.common import records
from tasks.common import sorted_parts

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

SortKey = Tuple[int, int, int]  # (read unit, record, example in record)


# ---------------------------------------------------------------- the task
class PipelineTask(abc.ABC):
  """What a task's preprocess gives the pipeline.

  Pickled to every worker: hold flag values and paths, not TF objects. A
  *unit* is what one reader call reads (a file by default); a *group* is
  the units whose counts and outputs go together (a file by default: its
  stats JSON and its TFRecords; pre-training: all of them).
  """

  strict: bool = False
  # Skip and count a record repeating an id instead of refusing its file.
  skip_duplicate_ids: bool = False

  @abc.abstractmethod
  def make_featurizer(self) -> Any:
    """The featurizer (called once per worker, and once by the driver)."""

  def units(self, files: Sequence[str]) -> List[Any]:
    return list(files)

  def group_of(self, unit: Any) -> str:
    return unit

  @abc.abstractmethod
  def read(self, unit: Any, stats: records.RecordStats,
           work_dir: str) -> Iterable[Any]:
    """The unit's valid records; bad ones counted in `stats` (never strict
    here). May write a per-unit file to `work_dir` (OpenKP's dedup)."""

  @abc.abstractmethod
  def make_step(self, featurizer: Any, unit: Any) -> preprocessing.RecordStep:
    """The unit's step."""

  @abc.abstractmethod
  def make_sink(self, featurizer: Any, group: str,
                files: "Collector") -> preprocessing.ExampleSink:
    """A sink for part of the group's records (its counts are summed with
    `merge_counts`), writing into `files`."""

  @abc.abstractmethod
  def outputs(self, group: str) -> Dict[str, List[str]]:
    """split -> the group's TFRecord file names (shards), in the output
    folder."""

  @abc.abstractmethod
  def write_reports(self, featurizer: Any, results: Dict[str, "GroupResult"],
                    work_dir: str, output_dir: str) -> List[str]:
    """Writes the stats JSONs into `work_dir`; returns the lines to
    print."""


def shard_names(record_name: str, num_shards: int) -> List[str]:
  """The TFRecord file names of one output: `<stem>.tfrecord` when it is one
  file, else `<stem>-00000-of-0000N.tfrecord`, ... (a glob of them is what
  the tasks' readers take)."""
  if num_shards == 1:
    return [record_name]
  stem, ext = os.path.splitext(record_name)
  return [f"{stem}-{i:05d}-of-{num_shards:05d}{ext}"
          for i in range(num_shards)]


class FileTask(PipelineTask):
  """A task with one output per input file, as `preprocessing.
  featurize_into`: `DIR/<stem>.tfrecord` and `DIR/<stem>.stats.json`
  (`RecordStats`), one summary line per file."""

  def output_paths(self, path: str, output_dir: str) -> Tuple[str, str]:
    """(tfrecord, stats JSON) of an input file."""
    return preprocessing.output_paths(path, output_dir)[:2]

  def make_sink(self, featurizer, group, files):
    return preprocessing.ExampleSink(
        records.RecordStats(input_file=group, strict=self.strict),
        featurizer.feature_spec(), files)

  def outputs(self, group):
    return {"": [os.path.basename(self.output_paths(group, "")[0])]}

  def write_reports(self, featurizer, results, work_dir, output_dir):
    lines = []
    for path in in_input_order(results):
      stats = results[path].sink.stats
      stats.write_json(self.output_paths(path, work_dir)[1])
      preprocessing.log_written(path, self.output_paths(path, output_dir)[0],
                                stats)
      lines.append(preprocessing.summary_line(path, stats))
    return lines


class Collector:
  """An `ExampleSink`'s files that keep the serialized examples (split,
  bytes) for the pipeline instead of writing them; `paths` are the final
  ones (the stats name them)."""

  def __init__(self, paths: Dict[str, List[str]]):
    self.paths = paths
    self.items: List[Tuple[str, bytes]] = []

  def write(self, serialized: bytes, split: str = "") -> None:
    self.items.append((split, serialized))

  def commit(self) -> None:
    pass

  def abort(self) -> None:
    pass


@dataclasses.dataclass
class GroupResult:
  """A group's counts: its sink (stats and task counters, summed), the
  reader's stats per unit, the step's bad records by record, failures."""
  sink: Optional[preprocessing.ExampleSink] = None
  reader_stats: List[Tuple[int, records.RecordStats]] = dataclasses.field(
      default_factory=list)
  step_skips: List[Tuple[SortKey, Dict[str, str]]] = dataclasses.field(
      default_factory=list)
  input_errors: List[Tuple[int, str]] = dataclasses.field(
      default_factory=list)
  # The group's first unit's index, once `stats` has merged (input order).
  order: int = 0

  def merge(self, other: "GroupResult") -> "GroupResult":
    if self.sink is None:
      self.sink = other.sink
    elif other.sink is not None:
      merge_counts(self.sink, other.sink)
    self.reader_stats.extend(other.reader_stats)
    self.step_skips.extend(other.step_skips)
    self.input_errors.extend(other.input_errors)
    return self

  def stats(self) -> records.RecordStats:
    """The group's stats in input order: the sink's counts, each unit's
    reader counts and skips (by unit), then the step's skips (by record)."""
    stats = self.sink.stats
    self.order = min((i for i, _ in self.reader_stats), default=self.order)
    for _, reader in sorted(self.reader_stats, key=lambda p: p[0]):
      merge_counts(stats, reader)
    for _, skip in sorted(self.step_skips, key=lambda p: p[0]):
      stats.skipped[skip["reason"]] += 1
      stats.skipped_records.append(skip)
    self.reader_stats, self.step_skips = [], []
    return stats

  def first_bad_record(self) -> Optional[records.BadRecordError]:
    """The bad record a strict single-process run fails on (after
    `stats`)."""
    skips = self.sink.stats.skipped_records
    if not skips:
      return None
    s = skips[0]
    return records.BadRecordError(s["file"], s["id"], s["field"],
                                  s["reason"], s.get("detail", ""))


def merge_counts(into: Any, other: Any) -> Any:
  """Adds `other`'s counts to `into` (a sink or its stats), attribute by
  attribute: ints and arrays add, Counters update, lists extend, nested
  `RecordStats` merge; anything else (settings, names, flags) is `into`'s.

  Counts must be Counters (not plain dicts) to be summed: a plain dict is
  taken as a setting.
  """
  for name, value in vars(other).items():
    mine = getattr(into, name, None)
    if isinstance(value, bool) or mine is None:
      continue
    if isinstance(value, collections.Counter):
      mine.update(value)
    elif isinstance(value, (int, np.ndarray)):
      setattr(into, name, mine + value)
    elif isinstance(value, list):
      mine.extend(value)
    elif isinstance(value, records.RecordStats):
      merge_counts(mine, value)
  return into


# ------------------------------------------------------------------ DoFns
class _Read(beam.DoFn):
  """(unit index, unit) -> ("record", (unit index, record index, unit,
  record)) ... and ("state", (group, GroupResult of the reader))."""

  def __init__(self, task: PipelineTask, work_dir: str):
    self.task = task
    self.work_dir = work_dir

  def process(self, element):
    index, unit = element
    group = self.task.group_of(unit)
    stats = records.RecordStats(
        input_file=str(unit), strict=False,
        skip_duplicate_ids=self.task.skip_duplicate_ids)
    result = GroupResult(reader_stats=[(index, stats)])
    try:
      for number, record in enumerate(
          self.task.read(unit, stats, self.work_dir)):
        yield "record", (index, number, unit, record)
    except records.InputFileError as e:
      result.input_errors.append((index, str(e)))
    yield "state", (group, result)


class _Featurize(beam.DoFn):
  """Records -> per bundle, ("part", (file name, (part file, in order)))
  for each output file it wrote examples of (`sorted_parts`, in the work
  folder's `_PARTS`), and ("state", (group, GroupResult)) with its
  counts."""

  def __init__(self, task: PipelineTask, work_dir: str):
    self.task = task
    self.parts_dir = os.path.join(work_dir, _PARTS)

  def setup(self):
    self.featurizer = self.task.make_featurizer()
    self.steps: Dict[Any, preprocessing.RecordStep] = {}

  def start_bundle(self):
    self.results: Dict[str, GroupResult] = {}
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
      sink = self.task.make_sink(self.featurizer, group, Collector({}))
      result = self.results[group] = GroupResult(sink=sink)
    sink, outputs = result.sink, self.task.outputs(group)
    outcomes = self._step(unit).process_all([e[3] for e in elements])
    for (index, number, _, _), (record, outcome) in zip(elements, outcomes):
      if isinstance(outcome, records.BadRecordError):
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


def shard_of(names: Sequence[str], key: SortKey) -> str:
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


def _save_states(states: Dict[str, GroupResult], work_dir: str) -> None:
  with tf.io.gfile.GFile(os.path.join(work_dir, _STATES_FILE), "wb") as f:
    f.write(pickle.dumps(states))


# ---------------------------------------------------------------- pipeline
def build(p: beam.Pipeline, task: PipelineTask, files: Sequence[str],
          work_dir: str, spread_records: bool = True) -> None:
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
  # Each side's states are picked out before the two meet: a Flatten of
  # `read` itself would encode every parsed record to feed it.
  _ = ((read | "ReaderStates" >> beam.Filter(is_state),
        featurized | "FeaturizerStates" >> beam.Filter(is_state))
       | "States" >> beam.Flatten()
       | "StateValues" >> beam.Map(lambda kv: kv[1])
       | "Combine" >> beam.CombineGlobally(_MergeResults())
       | "SaveStates" >> beam.Map(_save_states, work_dir))


def run(task: PipelineTask, files: Sequence[str], output_dir: str,
        beam_args: Sequence[str] = (),
        spread_records: Optional[bool] = None
        ) -> Tuple[Dict[str, GroupResult], List[str]]:
  """Runs the task's pipeline; on success moves its outputs and stats JSONs
  into `output_dir`. Returns the groups' results and the lines to print.
  `spread_records`: `build`'s; None: `spreads_records` decides.

  Raises:
    UserInputError: a bad pipeline option or runner (before anything runs).
    records.InputFileError: an input file cannot be read (the first one).
    records.BadRecordError: under strict, the first bad record in input
      order; `output_dir` is left untouched.
  """
  options = pipeline_options_from(beam_args)
  task = importable(task)
  featurizer = task.make_featurizer()  # A bad vocabulary fails here, once.
  output_dir = output_dir.rstrip("/") or "/"
  preprocessing.check_output_dir(output_dir)
  remove_stale_work_dirs(output_dir)
  work_dir = work_dir_of(output_dir)
  try:
    with _stop_signals_raise():
      with preprocessing.writing(work_dir):
        tf.io.gfile.makedirs(work_dir)
      with _quiet_beam_logs():
        with beam.Pipeline(runner=local_runner(options),
                           options=options) as p:
          if spread_records is None:
            spread_records = spreads_records(options, len(task.units(files)))
          build(p, task, files, work_dir, spread_records=spread_records)
      with tf.io.gfile.GFile(os.path.join(work_dir, _STATES_FILE), "rb") as f:
        results: Dict[str, GroupResult] = pickle.loads(f.read())
      tf.io.gfile.remove(os.path.join(work_dir, _STATES_FILE))
      if tf.io.gfile.exists(os.path.join(work_dir, _PARTS)):
        # Parts of bundles a runner retried: their outputs were not used.
        tf.io.gfile.rmtree(os.path.join(work_dir, _PARTS))
      for group in results:
        _complete(task, featurizer, group, results[group], work_dir,
                  output_dir)
      _check(task, results)
      with preprocessing.writing(work_dir):
        lines = task.write_reports(featurizer, results, work_dir, output_dir)
      _move_all(work_dir, output_dir)
      preprocessing.remove_stale_shards([
          os.path.join(output_dir, name) for group in results
          for names in task.outputs(group).values() for name in names])
  finally:
    if tf.io.gfile.exists(work_dir):
      tf.io.gfile.rmtree(work_dir)
  return results, lines


# What `--runner` names the local DirectRunner (none given is the same).
_DIRECT_RUNNERS = (None, "DirectRunner", "direct", "SwitchingDirectRunner")
_LOCAL_RUNNERS = _DIRECT_RUNNERS + ("BundleBasedDirectRunner", "FnApiRunner")


def local_runner(options: pipeline_options.PipelineOptions
                 ) -> Optional[beam_runner.PipelineRunner]:
  """The runner a local DirectRunner run uses: Beam's FnApiRunner, with the
  pipeline options handed to its workers as the DirectRunner hands them;
  None (the runner `--runner` names) for any other runner.

  Beam's DirectRunner picks one at run time: the Prism runner (a Go binary
  it downloads from GitHub on first use) when the network allows, else the
  FnApiRunner. The outputs, the worker modes and the throughput in
  docs/preprocessing.md are the FnApiRunner's, and a run should neither
  depend on the network nor hang on a blocked download, so that choice is
  made here. `--runner=PrismRunner` still asks for Prism.
  """
  runner = options.view_as(pipeline_options.StandardOptions).runner
  if runner not in _DIRECT_RUNNERS:
    return None
  # The same provision as DirectRunner.run_pipeline's FnApiRunner: the
  # worker processes read the pipeline options from it.
  from apache_beam.portability.api import beam_provision_api_pb2  # pylint: disable=g-import-not-at-top
  from apache_beam.runners.portability import portable_runner  # pylint: disable=g-import-not-at-top
  from apache_beam.runners.portability.fn_api_runner import fn_runner  # pylint: disable=g-import-not-at-top
  encoded = portable_runner.JobServiceHandle.encode_pipeline_options(
      options.get_all_options())
  return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
      beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def local_workers(options: pipeline_options.PipelineOptions
                  ) -> Optional[int]:
  """The DirectRunner's workers (1 by default: in this process; 0 asks for
  one per core); None on any other runner."""
  runner = options.view_as(pipeline_options.StandardOptions).runner
  if runner not in _LOCAL_RUNNERS:
    return None
  workers = options.view_as(pipeline_options.DirectOptions).direct_num_workers
  return workers or os.cpu_count() or 1


def spreads_records(options: pipeline_options.PipelineOptions,
                    num_units: int) -> bool:
  """Whether the records are reshuffled between reading and featurizing.

  On the local DirectRunner, only when there are fewer read units (files)
  than workers: otherwise every worker reads and featurizes units of its
  own, and reshuffling would only add the encoding of every record (NQ,
  2 files on 2 workers: 21.6 against 31.1 pages/s, docs/preprocessing.md).
  On any other runner, always: its workers are many, and come and go.
  """
  workers = local_workers(options)
  return workers is None or num_units < workers


def _check(task: PipelineTask, results: Dict[str, GroupResult]) -> None:
  """The failure a single-process run would have: an unreadable input (or
  a repeated id), under strict the first bad record, or an output without
  any example."""
  errors = sorted(e for r in results.values() for e in r.input_errors)
  if errors:
    raise records.InputFileError(errors[0][1])
  if task.strict:
    for group in in_input_order(results):
      error = results[group].first_bad_record()
      if error is not None:
        raise error
  for group in in_input_order(results):
    sink = results[group].sink
    if not sink.num_written():
      raise preprocessing.nothing_written_error(
          sink.stats.input_file or group, sink.stats.examples_read,
          sink.stats.skipped, sink.dropped_counts())


# The work folder of a run: `<output_dir>.tmp-<host>-<pid>-<random>`.
_WORK_DIR = re.compile(r"\.tmp-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8}$")


def work_dir_of(output_dir: str) -> str:
  """A new work folder beside `output_dir`, named by this host and
  process (`remove_stale_work_dirs` tells a dead run's by them)."""
  return (f"{output_dir}.tmp-{socket.gethostname()}-{os.getpid()}-"
          f"{uuid.uuid4().hex[:8]}")


def _process_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # Another user's process.
  return True


def remove_stale_work_dirs(output_dir: str) -> List[str]:
  """Removes the work folders of earlier runs over `output_dir` that were
  killed (kill -9, a lost machine) before they could remove their own: those
  of this host whose process is gone. A live run's folder, or another
  host's, is left alone. Returns the removed folders."""
  parent, base = os.path.split(output_dir)
  parent = parent or "."
  if not tf.io.gfile.isdir(parent):
    return []
  removed = []
  host = socket.gethostname()
  for name in tf.io.gfile.listdir(parent):
    name = name.rstrip("/")
    match = _WORK_DIR.match(name[len(base):]) if name.startswith(
        base) else None
    if (match is None or match.group("host") != host or
        _process_alive(int(match.group("pid")))):
      continue
    path = os.path.join(parent, name)
    tf.io.gfile.rmtree(path)
    removed.append(path)
  if removed:
    logging.info("removed the work folders of killed runs: %s", removed)
  return removed


class Stopped(SystemExit):
  """SIGTERM (or SIGINT) arrived: raised in the main thread so that the run's `finally`
  blocks remove its work folder (the default action would kill the process
  at once); the process then exits with 128 + the signal's number, as a
  killed one, without a traceback."""


@contextlib.contextmanager
def _stop_signals_raise():
  """SIGTERM and SIGINT (Ctrl-C) raise `Stopped` while the block runs;
  outside the main thread nothing changes.

  Beam wraps what a transform raises (a RuntimeError naming the step): the
  block's error, once the signal came, is `Stopped` again.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  received = []

  def handler(signum, frame):
    del frame  # Unused.
    received.append(signum)
    raise Stopped(128 + signum)

  previous = {signum: signal.signal(signum, handler)
              for signum in (signal.SIGTERM, signal.SIGINT)}
  try:
    yield
  except BaseException:
    if received:
      raise Stopped(128 + received[0]) from None
    raise
  finally:
    for signum, action in previous.items():
      signal.signal(signum, action)


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


def in_input_order(results: Dict[str, GroupResult]) -> List[str]:
  """The groups in the order of their inputs (after `run` merged them)."""
  return sorted(results, key=lambda g: results[g].order)


def _complete(task: PipelineTask, featurizer: Any, group: str,
              result: GroupResult, work_dir: str, output_dir: str) -> None:
  """A group's sink with its final output paths (an empty one when no
  record was featurized), and its empty shards written."""
  outputs = task.outputs(group)
  if result.sink is None:
    result.sink = task.make_sink(featurizer, group, Collector({}))
  result.stats()
  result.sink.stats.strict = task.strict
  result.sink.files = Collector({
      split: [os.path.join(output_dir, n) for n in names]
      for split, names in outputs.items()})
  for names in outputs.values():
    for name in names:
      path = os.path.join(work_dir, name)
      if not tf.io.gfile.exists(path):
        with tf.io.TFRecordWriter(path):
          pass


def _move_all(work_dir: str, output_dir: str) -> None:
  with preprocessing.writing(output_dir):
    tf.io.gfile.makedirs(output_dir)
  for name in tf.io.gfile.listdir(work_dir):
    with preprocessing.writing(os.path.join(output_dir, name)):
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


# ---------------------------------------------------------------- options
class _OptionParser(pipeline_options._BeamArgumentParser):  # pylint: disable=protected-access
  """Beam's option parser, whose errors are one line (not argparse's usage
  text and exit)."""

  def error(self, message):
    raise UserInputError(f"pipeline option: {message}")


def pipeline_options_from(args: Sequence[str]
                          ) -> pipeline_options.PipelineOptions:
  """Beam's `PipelineOptions` of the arguments absl did not take.

  Raises:
    UserInputError: an argument no Beam option knows (a typo: Beam itself
      would only warn), a bad value, or an unknown runner.
  """
  parser = _OptionParser(allow_abbrev=False)
  seen = set()
  for cls in pipeline_options.PipelineOptions.__subclasses__():
    if str(cls) not in seen:
      seen.add(str(cls))
      cls._add_argparse_args(parser)  # pylint: disable=protected-access
  known, unknown = parser.parse_known_args(list(args))
  if unknown:
    known_names = [o for a in parser._actions for o in a.option_strings]  # pylint: disable=protected-access
    name = unknown[0].split("=", 1)[0]
    guess = difflib.get_close_matches(name, known_names, 1)
    raise UserInputError(
        f"unknown option {unknown[0]!r}" +
        (f" (did you mean {guess[0]}?)" if guess else
         " (neither a flag of this binary nor a Beam pipeline option)"))
  if known.runner:
    try:
      beam_runner.create_runner(known.runner)
    except (ValueError, ImportError) as e:
      raise UserInputError(f"--runner={known.runner}: {e}") from e
  args = list(args)
  if known.default_sdk_harness_log_level is None:
    # Worker processes would log every start and stop on the binary's stderr.
    args.append("--default_sdk_harness_log_level=ERROR")
  return pipeline_options.PipelineOptions(args)


# ---------------------------------------------------------------- binaries
def _parse_known_flags(argv: List[str]) -> List[str]:
  """absl's flags; the rest (Beam's options, positional arguments) is left
  to `main`."""
  try:
    return flags.FLAGS(argv, known_only=True)
  except flags.Error as e:
    print(f"error: {e}", file=sys.stderr, flush=True)
    sys.exit(cli.EXIT_USER_ERROR)


def beam_args_of(argv: Sequence[str]) -> List[str]:
  """The Beam options among `main`'s arguments (after the program name).

  Raises:
    UserInputError: a positional argument.
  """
  positional = [a for a in argv[1:] if not a.startswith("-")]
  if positional:
    raise UserInputError(f"unexpected arguments: {positional}")
  return list(argv[1:])


def run_binary(main: Callable[[List[str]], Optional[int]]) -> None:
  """`cli.run` for a preprocess binary: flags absl does not know are left
  in `main`'s argv for Beam (`beam_args_of`); SIGTERM stops it as Ctrl-C
  does, through its cleanup (`Stopped`), on every path (a TFDS input's
  single-process run too)."""
  def stoppable(argv):
    with _stop_signals_raise():
      return main(argv)
  app.run(cli.guarded(stoppable), flags_parser=_parse_known_flags)


def check_command_line(argv: Sequence[str], required: Sequence[str],
                       one_of: Sequence[str] = ()) -> List[str]:
  """`preprocessing.check_command_line` for a Beam binary; returns the Beam
  options."""
  beam_args = beam_args_of(argv)
  preprocessing.check_command_line(argv[:1], required, one_of)
  return beam_args
