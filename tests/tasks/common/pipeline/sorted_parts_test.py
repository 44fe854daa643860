"""Tests for tasks.common.pipeline.sorted_parts: parts written in any order
merge into one file in key order, and the parts are removed."""

import os

import tensorflow as tf

import random
from tasks.common.pipeline import sorted_parts


def _records(path):
  return [r.numpy() for r in tf.data.TFRecordDataset(path)]


def _write(path, items):
  writer = sorted_parts.PartWriter(path)
  for key, value in items:
    writer.write(key, value)
  writer.close()
  return writer


def test_part_round_trip_and_order_flag(tmp_path):
  items = [((0, 1, 0), b"a"), ((0, 1, 1), b""), ((2, 2**40, 0), b"\x00z")]
  writer = _write(str(tmp_path / "in_order"), items)
  assert writer.in_order and writer.count == 3
  assert list(sorted_parts.read_part(writer.path)) == items
  shuffled = _write(str(tmp_path / "shuffled"), items[::-1])
  assert not shuffled.in_order


def test_merge_writes_every_value_in_key_order(tmp_path):
  keys = [(unit, record, j) for unit in range(3) for record in range(7)
          for j in range(2)]
  value = lambda key: repr(key).encode()
  rng = random.Random(0)
  # Two parts in order (whole files on one worker), one shuffled (records
  # spread over workers).
  first = _write(str(tmp_path / "a"), [(k, value(k)) for k in keys[0:30:2]])
  second = _write(str(tmp_path / "b"), [(k, value(k)) for k in keys[1:30:2]])
  rest = [(k, value(k)) for k in keys[30:]]
  rng.shuffle(rest)
  third = _write(str(tmp_path / "c"), rest)
  assert first.in_order and second.in_order and not third.in_order
  out = str(tmp_path / "out.tfrecord")
  parts = [(w.path, w.in_order) for w in (third, first, second)]
  assert sorted_parts.merge(parts, out) == len(keys)
  assert _records(out) == [value(k) for k in keys]
  assert sorted(os.listdir(tmp_path)) == ["out.tfrecord"]


def test_merge_of_no_parts_is_an_empty_file(tmp_path):
  out = str(tmp_path / "empty.tfrecord")
  assert sorted_parts.merge([], out) == 0
  assert _records(out) == []


def test_merge_can_keep_the_parts(tmp_path):
  part = _write(str(tmp_path / "p"), [((0, 0, 0), b"x")])
  sorted_parts.merge([(part.path, True)], str(tmp_path / "o"),
                     remove_parts=False)
  assert os.path.exists(part.path)
