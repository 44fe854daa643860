"""Tests for tasks.common.output_files: reports and JSON lines written whole,
and predictions unbatched."""

import errno
import gzip
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tasks.common import output_files
from tasks.common.inputs import input_files


def test_write_json_keeps_text_and_ends_with_a_newline(tmp_path):
  path = str(tmp_path / "out.json")
  output_files.write_json(path, {"b": "Café", "a": [1]}, sort_keys=True)
  with open(path, encoding="utf-8") as f:
    text = f.read()
  assert text.endswith("}\n") and "Café" in text
  assert text.index('"a"') < text.index('"b"')
  assert json.loads(text) == {"a": [1], "b": "Café"}


def test_reports_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
  path = tmp_path / "metrics.json"
  output_files.write_json(str(path), {"f1": 0.5})
  regular = tmp_path / "somefile"
  regular.write_text("x")
  with pytest.raises(output_files.OutputFileError,
                     match=f"{regular}/m.json: cannot write output"):
    output_files.write_json(str(regular / "m.json"), {"f1": 1.0})

  class FullDisk(tf.io.gfile.GFile):
    def write(self, data):
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  monkeypatch.setattr(tf.io.gfile, "GFile", FullDisk)
  with pytest.raises(output_files.OutputFileError,
                     match=f"{path}: cannot write output: No space left"):
    output_files.write_json(str(path), {"f1": 1.0})
  monkeypatch.undo()
  # The earlier file is whole, and no temporary file is left.
  assert json.loads(path.read_text()) == {"f1": 0.5}
  assert sorted(os.listdir(tmp_path)) == ["metrics.json", "somefile"]


def test_write_jsonl_plain_and_gzip(tmp_path):
  values = [{"id": 1, "text": "naïve ☃"}, [1, 2], "s"]
  plain = str(tmp_path / "out.jsonl")
  assert output_files.write_jsonl(plain, values) == 3
  with open(plain, encoding="utf-8") as f:
    lines = f.read().splitlines()
  assert lines[0] == '{"id": 1, "text": "naïve ☃"}'  # Non-ASCII kept.
  assert [json.loads(line) for line in lines] == values
  packed = str(tmp_path / "out.jsonl.gz")
  assert output_files.write_jsonl(packed, iter(values)) == 3
  with open(packed, "rb") as f:
    data = f.read()
  # The same bytes as a one-shot gzip.compress with a zero timestamp (no
  # file name, no time): reruns give identical files.
  with open(plain, "rb") as f:
    assert data == gzip.compress(f.read(), mtime=0)
  assert [json.loads(l) for _, l in input_files.read_lines(packed)] == values
  assert output_files.write_jsonl(str(tmp_path / "empty.jsonl"), []) == 0


def test_unbatch():
  batched = {"a": np.arange(3), "b": np.array([[1, 2], [3, 4], [5, 6]])}
  rows = output_files.unbatch(batched)
  assert len(rows) == 3
  assert rows[1]["a"] == 1 and rows[2]["b"].tolist() == [5, 6]
  assert output_files.unbatch({}) == []
  with pytest.raises(ValueError, match="different lengths"):
    output_files.unbatch({"a": np.arange(3), "b": np.arange(2)})
