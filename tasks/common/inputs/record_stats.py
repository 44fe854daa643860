"""The bad-record policy and the statistics written next to every cache.

A bad record raises `input_errors.BadRecordError`;
`RecordStats.handle_bad_record` then either re-raises it (`strict=True`) or
skips it, counting it per reason and naming it in the stats JSON.
`skipping_bad_records` is the TFDS builders' version (skip, log once).
"""

import collections
import dataclasses
import json
from typing import Any, Callable, Dict, Iterator, List, TypeVar

from absl import logging
import tensorflow as tf

from tasks.common import output_files
from tasks.common.inputs import input_errors

R = TypeVar("R")  # A task's validated record.


@dataclasses.dataclass
class RecordStats:
  """Counts for one input file, written as JSON next to the cached features.

  Attributes:
    input_file: the file read.
    strict: whether bad records fail (True) or are skipped (False).
    skip_duplicate_ids: whether a record repeating an earlier one's id is
      skipped and counted (`DUPLICATE_ID`) instead of refusing the file
      (`UniqueIds`); a setting, not written to the JSON (the skips are).
    examples_read: records found in the file, good or bad.
    examples_written: records turned into cached examples.
    examples_truncated: written examples that lost some input to fit.
    truncation: totals of what was dropped (task-specific keys).
    skipped: number of skipped records per reason.
    skipped_records: one entry per skipped record: file, id, field, reason.
  """
  input_file: str = ""
  strict: bool = False
  skip_duplicate_ids: bool = False
  examples_read: int = 0
  examples_written: int = 0
  examples_truncated: int = 0
  truncation: Dict[str, int] = dataclasses.field(
      default_factory=collections.Counter)
  skipped: Dict[str, int] = dataclasses.field(
      default_factory=collections.Counter)
  skipped_records: List[Dict[str, str]] = dataclasses.field(
      default_factory=list)

  @property
  def num_skipped(self) -> int:
    return sum(self.skipped.values())

  def handle_bad_record(self, error: input_errors.BadRecordError) -> None:
    """Raises `error` in strict mode, else counts and names the record."""
    if self.strict:
      raise error
    self.skipped[error.reason] += 1
    self.skipped_records.append(error.to_dict())

  def add_truncation(self, amounts: Dict[str, int]) -> None:
    """Adds one written example's dropped amounts (all zero = untruncated)."""
    if any(v > 0 for v in amounts.values()):
      self.examples_truncated += 1
    for key, value in amounts.items():
      self.truncation[key] += int(value)

  def to_dict(self) -> Dict[str, Any]:
    return dict(
        input_file=self.input_file,
        strict=self.strict,
        examples_read=self.examples_read,
        examples_written=self.examples_written,
        examples_skipped=self.num_skipped,
        examples_truncated=self.examples_truncated,
        truncation=dict(sorted(self.truncation.items())),
        skipped=dict(sorted(self.skipped.items())),
        skipped_records=list(self.skipped_records),
    )

  def write_json(self, path: str) -> None:
    """Writes the stats whole (`whole_file`)."""
    with output_files.whole_file(path) as tmp, tf.io.gfile.GFile(tmp, "w") as f:
      json.dump(self.to_dict(), f, indent=2, sort_keys=False)
      f.write("\n")


def skipping_bad_records(path: str,
                         read_records: Callable[..., Iterator[R]]
                         ) -> Iterator[R]:
  """`read_records(path, stats=...)`'s valid records; the bad ones are
  skipped and logged once at the end, as a warning with the counts per
  reason (the TFDS builders' policy)."""
  stats = RecordStats(input_file=path, strict=False)
  yield from read_records(path, stats=stats)
  if stats.num_skipped:
    logging.warning("%s: skipped %d bad records %s", path, stats.num_skipped,
                    dict(stats.skipped))


def read_stats_json(path: str) -> Dict[str, Any]:
  with tf.io.gfile.GFile(path, "r") as f:
    return json.load(f)
