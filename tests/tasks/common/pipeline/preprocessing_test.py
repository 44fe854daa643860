"""Tests for tasks.common.pipeline.preprocessing: the preprocess skeleton
(steps, sinks, run: skip and count or fail under strict, all-or-nothing
outputs)."""

import glob
import os

import pytest
import tensorflow as tf

import full_disk_testing
from etc_realformer.data import tfrecords
from tasks.common import output_files
from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.common.pipeline import preprocessing
from tasks.common.pipeline import tfrecord_shards

# ------------------------------------------------------------------ skeleton
_SPEC = {"total": (tf.int32, ()), "id": (tf.string, ())}


def _sum_features(numbers, id_):
  """The toy featurizer: the sum of at most 3 numbers, and the id."""
  return ({"total": tf.reduce_sum(numbers[:3]), "id": id_},
          {"numbers_cut": tf.maximum(tf.size(numbers) - 3, 0)})


class _SumStep(preprocessing.GraphStep):
  """A toy in-graph step: the sum of a record's numbers (at most 3 of them);
  a negative sum is a bad record, a zero one is dropped."""

  input_signature = dict(numbers=tf.TensorSpec([None], tf.int32),
                         id=tf.TensorSpec([], tf.string))

  def feature_spec(self):
    return _SPEC

  def to_inputs(self, record):
    return dict(numbers=record["numbers"], id=record["id"])

  def featurize(self, inputs):
    return _sum_features(inputs["numbers"], inputs["id"])

  def finish(self, record, features, amounts):
    if features["total"] < 0:
      return input_errors.BadRecordError("f.json", record["id"], "numbers",
                                         "negative")
    if features["total"] == 0:
      return preprocessing.Dropped("zero")
    return preprocessing.Featurized([features], amounts)


_RECORDS = [dict(id="a", numbers=[1, 2]), dict(id="b", numbers=[-5]),
            dict(id="c", numbers=[]), dict(id="d", numbers=[1, 1, 1, 7, 9])]


class _CountingSink(preprocessing.ExampleSink):
  """The default sink, counting dropped records too."""

  def __init__(self, *args):
    super().__init__(*args)
    self.dropped = []

  def drop(self, record, reason):
    self.dropped.append((record["id"], reason))


def _read(path):
  return list(tfrecords.make_dataset(path, _SPEC).as_numpy_iterator())


@pytest.mark.parametrize("dataset_min_records", [1, 256])
def test_process_is_process_all_one_record_at_a_time(dataset_min_records):
  # 1: process_all maps over tf.data; 256: it calls process per record.
  step = _SumStep(None, "f.json")
  step.dataset_min_records = dataset_min_records
  together = list(step.process_all(iter(_RECORDS)))
  assert [r["id"] for r, _ in together] == ["a", "b", "c", "d"]
  for record, outcome in together:
    alone = step.process(record)
    assert type(alone) is type(outcome)
    if isinstance(outcome, preprocessing.Featurized):
      assert alone.amounts == outcome.amounts
      assert alone.examples[0]["total"] == outcome.examples[0]["total"]
      assert alone.examples[0]["id"] == outcome.examples[0]["id"]
  assert together[3][1].amounts == {"numbers_cut": 2}
  assert together[2][1] == preprocessing.Dropped("zero")
  assert list(step.process_all([])) == []


class _SumFeaturizer:
  """`_sum_features` as a featurizer's `record_fn`: a `tf.function` with an
  input signature."""

  def __init__(self):
    self.record_fn = tf.function(
        _sum_features, input_signature=[tf.TensorSpec([None], tf.int32),
                                        tf.TensorSpec([], tf.string)])


class _SumFnStep(preprocessing.RecordFnStep, _SumStep):
  """`_SumStep` over its featurizer's `record_fn` (positional inputs)."""

  def to_inputs(self, record):
    return record["numbers"], record["id"]


@pytest.mark.parametrize("dataset_min_records", [1, 256])
def test_record_fn_step_runs_the_featurizers_signature(dataset_min_records):
  step = _SumFnStep(_SumFeaturizer(), "f.json")
  assert step.input_signature == tuple(
      step.featurizer.record_fn.input_signature)
  step.dataset_min_records = dataset_min_records
  graph_step = _SumStep(None, "f.json")
  for (record, outcome), (_, expected) in zip(
      step.process_all(_RECORDS), graph_step.process_all(_RECORDS)):
    assert type(outcome) is type(expected), record["id"]
    if isinstance(outcome, preprocessing.Featurized):
      assert outcome.amounts == expected.amounts
      assert outcome.examples[0]["total"] == expected.examples[0]["total"]


def test_is_training_file_is_the_flag_else_the_file_name():
  assert preprocessing.is_training_file("/d/Train-1.json")
  assert not preprocessing.is_training_file("/train/dev.json")
  assert not preprocessing.is_training_file("train.json", False)
  assert preprocessing.is_training_file("dev.json", True)


def test_read_file_gives_the_valid_records_and_their_stats():
  calls = []

  def read_records(path, stats, require_labels):
    calls.append((path, require_labels))
    stats.examples_read += 2
    stats.handle_bad_record(input_errors.BadRecordError(
        path, "b", "numbers", "negative"))
    yield _RECORDS[0]

  valid, stats = preprocessing.read_file(read_records, "f.json",
                                         require_labels=True)
  assert valid == [_RECORDS[0]] and calls == [("f.json", True)]
  assert stats.input_file == "f.json" and stats.examples_read == 2
  assert dict(stats.skipped) == {"negative": 1}
  with pytest.raises(input_errors.BadRecordError, match="'b'"):
    preprocessing.read_file(read_records, "f.json", strict=True,
                            require_labels=False)


def test_run_counts_skips_and_writes(tmp_path):
  stats = record_stats.RecordStats(input_file="f.json")
  path = str(tmp_path / "f.tfrecord")
  sink = _CountingSink(stats, _SPEC, {"": [path]})
  preprocessing.run(_RECORDS, _SumStep(None, "f.json"), sink)
  assert [(e["id"], e["total"]) for e in _read(path)] == [(b"a", 3),
                                                         (b"d", 3)]
  assert sink.dropped == [("c", "zero")]
  assert stats.examples_written == 2 and stats.examples_truncated == 1
  assert dict(stats.truncation) == {"numbers_cut": 2}
  assert dict(stats.skipped) == {"negative": 1}
  assert stats.skipped_records[0]["id"] == "b"
  assert not os.path.exists(path + ".tmp")


def test_strict_fails_on_the_first_bad_record_and_leaves_nothing(tmp_path):
  stats = record_stats.RecordStats(input_file="f.json", strict=True)
  path = str(tmp_path / "f.tfrecord")
  with pytest.raises(input_errors.BadRecordError, match="'b', field 'numbers'"):
    preprocessing.run(_RECORDS, _SumStep(None, "f.json"),
                      _CountingSink(stats, _SPEC, {"": [path]}))
  assert not os.listdir(tmp_path)


def test_the_default_sink_does_not_drop(tmp_path):
  stats = record_stats.RecordStats(input_file="f.json")
  path = str(tmp_path / "f.tfrecord")
  with pytest.raises(ValueError, match="dropped records"):
    preprocessing.run(_RECORDS, _SumStep(None, "f.json"),
                      preprocessing.ExampleSink(stats, _SPEC, {"": [path]}))
  assert not os.listdir(tmp_path)


def test_featurize_into_writes_the_cache_and_its_stats(tmp_path):
  stats = record_stats.RecordStats(input_file="/in/dev.json")
  out = tmp_path / "out"
  preprocessing.featurize_into(str(out), [_RECORDS[0], _RECORDS[3]],
                               _SumStep(None, "f.json"), stats)
  record_path, stats_path = preprocessing.output_paths("dev.json", str(out))
  assert len(_read(record_path)) == 2
  assert record_stats.read_stats_json(stats_path)["examples_written"] == 2
  # No record written: a failure naming the input, the earlier cache kept.
  with pytest.raises(preprocessing.NothingWrittenError,
                     match="dev.json: no example written: read 0"):
    preprocessing.featurize_into(
        str(out), [], _SumStep(None, "f.json"),
        record_stats.RecordStats(input_file="dev.json"))
  assert len(_read(record_path)) == 2
  assert sorted(os.listdir(out)) == ["dev.stats.json", "dev.tfrecord"]


def test_tfrecord_shards_round_robin_all_or_nothing(tmp_path):
  paths = {"train": [str(tmp_path / f"t{i}") for i in range(3)],
           "eval": [str(tmp_path / "e")]}
  shards = tfrecord_shards.TFRecordShards(paths)
  for i in range(7):
    shards.write(b"%d" % i, "train")
  shards.write(b"x", "eval")
  assert not any(os.path.exists(p) for ps in paths.values() for p in ps)
  shards.commit()

  def read(path):
    return [r.numpy() for r in tf.data.TFRecordDataset(path)]

  assert [read(p) for p in paths["train"]] == [[b"0", b"3", b"6"],
                                               [b"1", b"4"], [b"2", b"5"]]
  assert read(paths["eval"][0]) == [b"x"]
  aborted = tfrecord_shards.TFRecordShards({"": [str(tmp_path / "gone")]})
  aborted.write(b"y")
  aborted.abort()
  assert sorted(os.listdir(tmp_path)) == ["e", "t0", "t1", "t2"]


def test_nothing_written_names_what_was_read_and_the_top_reasons(tmp_path):
  stats = record_stats.RecordStats(input_file="other_task.json")
  path = str(tmp_path / "f.tfrecord")
  # Every record bad: a failure, no output.
  with pytest.raises(preprocessing.NothingWrittenError) as error:
    preprocessing.run(_RECORDS[1:3], _SumStep(None, "f.json"),
                      _CountingSink(stats, _SPEC, {"": [path]}))
  assert str(error.value).startswith(
      "other_task.json: no example written: read 0 records, skipped or "
      "dropped: ")
  assert not os.listdir(tmp_path)
  message = str(preprocessing.nothing_written_error(
      "in.txt", 9, {"a": 1, "b": 5, "c": 2, "d": 1}, {"too_short": 3}))
  assert message == ("in.txt: no example written: read 9 records, skipped "
                     "or dropped: b 5, too_short 3, c 2, and 2 more reasons "
                     "(is it a file of this task?)")


def test_shards_replace_an_earlier_runs_output_whole(tmp_path):
  def write(num_shards, count):
    paths = [str(tmp_path / f"train-{i:05d}-of-{num_shards:05d}.tfrecord")
             for i in range(num_shards)]
    shards = tfrecord_shards.TFRecordShards({"train": paths})
    for i in range(count):
      shards.write(b"%d" % i, "train")
    shards.commit()

  other = tmp_path / "dev.tfrecord"  # Another output: left alone.
  other.write_bytes(b"")
  write(4, 8)
  write(2, 3)
  names = sorted(os.listdir(tmp_path))
  assert names == ["dev.tfrecord", "train-00000-of-00002.tfrecord",
                   "train-00001-of-00002.tfrecord"]
  files = glob.glob(str(tmp_path / "train-*.tfrecord"))
  assert sum(1 for _ in tf.data.TFRecordDataset(files)) == 3
  write(1, 2)  # One shard is still of the family.
  assert len(glob.glob(str(tmp_path / "train-*"))) == 1


def test_an_unwritable_output_names_its_path_and_leaves_nothing(
    tmp_path, monkeypatch):
  regular = tmp_path / "somefile"
  regular.write_text("x")
  with pytest.raises(output_files.OutputFileError,
                     match=f"{regular}/out: cannot write output: {regular} "
                     "is a regular file"):
    preprocessing.featurize_into(
        str(regular / "out"), [_RECORDS[0]], _SumStep(None, "f.json"),
        record_stats.RecordStats(input_file="dev.json"))

  full_disk_testing.fill_the_disk(monkeypatch)
  out = tmp_path / "out"
  with pytest.raises(output_files.OutputFileError,
                     match=f"{out}/dev.tfrecord: cannot write output: No "
                     "space left on device"):
    preprocessing.featurize_into(
        str(out), [_RECORDS[0]], _SumStep(None, "f.json"),
        record_stats.RecordStats(input_file="dev.json"))
  assert os.listdir(out) == []
