"""Keyed records written by many workers as part files, merged into one
file in key order.

The Beam pipeline's workers write the serialized examples they featurize
into part files of their own (one per bundle and output shard) and hand on
only the parts' names; the step that writes a shard merges its parts by
sort key. The examples then never pass through the runner's shuffle: on NQ
pages, shipping them there cost about a third of the throughput
(docs/preprocessing.md).

A part is a TFRecord file whose records are the key (three big-endian
int64) followed by the value. A part written in key order (one worker
featurizing whole files) is streamed by the merge; any other part is
sorted in memory first.

  writer = PartWriter(path)
  writer.write((0, 3, 0), serialized)
  writer.close()
  merge([(writer.path, writer.in_order)], "out.tfrecord")
"""

from typing import Iterator, List, Sequence, Tuple

import tensorflow as tf

import heapq
from tasks.common import output_files

Key = Tuple[int, int, int]

_KEY_BYTES = 24


def _pack(key: Key) -> bytes:
  return b"".join(int(k).to_bytes(8, "big", signed=True) for k in key)


def _unpack(record: bytes) -> Tuple[Key, bytes]:
  key = tuple(int.from_bytes(record[i:i + 8], "big", signed=True)
              for i in range(0, _KEY_BYTES, 8))
  return key, record[_KEY_BYTES:]


class PartWriter:
  """Appends (key, value) records to one part file.

  Attributes:
    path: the part file.
    in_order: whether every key so far came after the one before.
    count: the records written.
  """

  def __init__(self, path: str):
    self.path = path
    self.in_order = True
    self.count = 0
    self._last = None
    with output_files.writing(path):
      self._writer = tf.io.TFRecordWriter(path)

  def write(self, key: Key, value: bytes) -> None:
    """Appends one record.

    Raises:
      output_files.OutputFileError: naming the part (a full disk).
    """
    if self._last is not None and key < self._last:
      self.in_order = False
    self._last = key
    with output_files.writing(self.path):
      self._writer.write(_pack(key) + value)
    self.count += 1

  def close(self) -> None:
    with output_files.writing(self.path):
      self._writer.close()


def read_part(path: str) -> Iterator[Tuple[Key, bytes]]:
  """A part's (key, value) records, in the order written."""
  for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
    yield _unpack(record)


def merge(parts: Sequence[Tuple[str, bool]], path: str,
          remove_parts: bool = True) -> int:
  """Writes the values of `parts` ((file, in_order) pairs) to the TFRecord
  file `path` in key order; returns their number. The parts are removed
  after, unless `remove_parts` is False."""
  streams: List[Iterator[Tuple[Key, bytes]]] = [
      read_part(p) if in_order else iter(sorted(read_part(p),
                                                key=lambda kv: kv[0]))
      for p, in_order in parts]
  count = 0
  with output_files.writing(path), tf.io.TFRecordWriter(path) as writer:
    for _, value in heapq.merge(*streams, key=lambda kv: kv[0]):
      writer.write(value)
      count += 1
  if remove_parts:
    for p, _ in parts:
      tf.io.gfile.remove(p)
  return count
