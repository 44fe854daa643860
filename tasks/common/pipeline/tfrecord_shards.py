"""The cache's TFRecord files: all-or-nothing shards, and an earlier run's.

- `TFRecordShards`: one output's shards per split, examples written round
  robin; committed whole, or removed when the run fails;
- `output_family` / `remove_stale_shards`: the files of the same output an
  earlier run left (`train-*-of-00004` beside a new `-of-00002`), removed
  once this run's are written, so that the documented glob reads this run's
  examples only.
"""

import collections
import fnmatch
import os
import re
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from absl import logging
import tensorflow as tf

from tasks.common import output_files


# `<stem>-00000-of-00004.<ext>`: one shard of a sharded output.
_SHARD = re.compile(r"^(?P<stem>.+)-\d{5}-of-\d{5}(?P<ext>\.[^.]+)$")


def output_family(name: str) -> Tuple[str, str]:
  """The file name patterns of every form of the output `name`: one file
  (`<stem>.tfrecord`) or shards (`<stem>-*-of-*.tfrecord`)."""
  match = _SHARD.match(name)
  if match:
    stem, ext = match.group("stem"), match.group("ext")
  else:
    stem, ext = os.path.splitext(name)
  return f"{stem}{ext}", f"{stem}-[0-9][0-9][0-9][0-9][0-9]-of-" \
      f"[0-9][0-9][0-9][0-9][0-9]{ext}"


def remove_stale_shards(paths: Sequence[str]) -> List[str]:
  """Removes the files of an earlier run of the same outputs: those of the
  `output_family` of one of `paths` (in the same folder) that are not among
  `paths`. Returns the removed paths.

  Called once the new files are in place: a failed run leaves the earlier
  output whole, a successful one leaves only its own.
  """
  keep = set(paths)
  families: Dict[str, set] = collections.defaultdict(set)
  for path in paths:
    families[os.path.dirname(path)].update(
        output_family(os.path.basename(path)))
  removed = []
  for folder, patterns in families.items():
    if not tf.io.gfile.isdir(folder or "."):
      continue
    for name in tf.io.gfile.listdir(folder or "."):
      path = os.path.join(folder, name)
      if path not in keep and any(fnmatch.fnmatchcase(name, p)
                                  for p in patterns):
        tf.io.gfile.remove(path)
        removed.append(path)
  if removed:
    logging.info("removed %d files of an earlier run: %s", len(removed),
                 removed)
  return removed


# ---------------------------------------------------------------------- sinks
class TFRecordShards:
  """TFRecord files written all or nothing; each split round-robin over its
  shards.

  Every file is written as `<path>.tmp`: `commit` renames them all once
  everything is written, and removes the shards an earlier run of the same
  outputs left (`remove_stale_shards`); `abort` (after any error: a bad
  record under strict, an interrupt, a full disk) removes them, so no
  partial output is left. Write errors are `OutputFileError`s naming the
  file.
  """

  def __init__(self, paths: Mapping[str, Sequence[str]]):
    """Opens the files.

    Args:
      paths: split -> its shards' paths (e.g. {"": [DIR/dev.tfrecord]}).
    """
    self.paths = {split: list(shards) for split, shards in paths.items()}
    self._writers: Dict[str, List[Any]] = {}
    self._written = collections.Counter()
    try:
      for split, shards in self.paths.items():
        self._writers[split] = []
        for path in shards:
          with output_files.writing(path):
            self._writers[split].append(tf.io.TFRecordWriter(path + ".tmp"))
    except BaseException:
      self.abort()
      raise

  def write(self, serialized: bytes, split: str = "") -> None:
    """Writes one record to the split's next shard."""
    index = self._written[split] % len(self._writers[split])
    with output_files.writing(self.paths[split][index]):
      self._writers[split][index].write(serialized)
    self._written[split] += 1

  def commit(self) -> None:
    self._close()
    for shards in self.paths.values():
      for path in shards:
        with output_files.writing(path):
          tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
    remove_stale_shards([p for ps in self.paths.values() for p in ps])

  def abort(self) -> None:
    try:
      self._close()
    except output_files.OutputFileError:
      pass  # The files are removed anyway; the first error is reported.
    for shards in self.paths.values():
      for path in shards:
        if tf.io.gfile.exists(path + ".tmp"):
          tf.io.gfile.remove(path + ".tmp")

  def _close(self) -> None:
    for split, writers in self._writers.items():
      for path, writer in zip(self.paths[split], writers):
        with output_files.writing(path):
          writer.close()
