"""What a task gives the Beam pipeline, and what the pipeline gives back.

- `PipelineTask`: a task's featurizer, read units, reader, step, sink,
  outputs and reports (picklable: flag values and paths only); `FileTask`:
  one output group per input file, as the single-process binaries write;
  `LabelledTrainingFiles`: the `read` of a task whose training files need
  labels;
- `GroupResult`: an output group's counts, merged across bundles and
  workers (`merge_counts`: sums, settings kept), with its skipped records
  put back in input order;
- `Collector`: the sink's files while the pipeline runs (the part files
  are written by the pipeline itself); `shard_names`: an output's shards.
"""

import abc
import collections
import dataclasses
import os
from typing import (Any, Callable, Dict, Iterable, List, Optional, Sequence,
                    Tuple)

import numpy as np

from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.common.pipeline import preprocessing

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
  def read(self, unit: Any, stats: record_stats.RecordStats,
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
        record_stats.RecordStats(input_file=group, strict=self.strict),
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


class LabelledTrainingFiles:
  """A task whose records need labels in training files: `is_training`
  (None: by file name, `preprocessing.is_training_file`) and `read` by the
  task's reader, `read_records(path, stats=..., require_labels=...)`.

  Put before the task's `PipelineTask` base, so that its `read` serves.
  """

  is_training: Optional[bool] = None
  read_records: Callable[..., Iterable[Any]]

  def is_training_file(self, path: str) -> bool:
    return preprocessing.is_training_file(path, self.is_training)

  def read(self, unit: str, stats: record_stats.RecordStats,
           work_dir: str) -> Iterable[Any]:
    del work_dir  # Unused.
    return self.read_records(unit, stats=stats,
                             require_labels=self.is_training_file(unit))


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
  reader_stats: List[Tuple[int, record_stats.RecordStats]] = dataclasses.field(
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

  def stats(self) -> record_stats.RecordStats:
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

  def first_bad_record(self) -> Optional["input_errors.BadRecordError"]:
    """The bad record a strict single-process run fails on (after
    `stats`)."""
    skips = self.sink.stats.skipped_records
    if not skips:
      return None
    s = skips[0]
    return input_errors.BadRecordError(s["file"], s["id"], s["field"],
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
    elif isinstance(value, record_stats.RecordStats):
      merge_counts(mine, value)
  return into


def in_input_order(results: Dict[str, GroupResult]) -> List[str]:
  """The groups in the order of their inputs (after `run` merged them)."""
  return sorted(results, key=lambda g: results[g].order)
