"""Tests for tasks.common.pipeline.beam_pipeline: each preprocess binary's
pipeline on the DirectRunner, in-process and with 2 worker processes, gives the
single-process outputs (the same examples, the same stats); a bad record in one
of two files is skipped and counted once, or under strict fails in one line with
no output (the binary: one line, exit code 2); a pipeline option typo or an
unknown runner is a user error before anything runs."""

import collections
import copy
import dataclasses
import glob
import json
import os
import signal

import pytest
import tensorflow as tf

from demos.nq import synthetic
import cli_testing
import full_disk_testing
import hotpotqa_testing
import openkp_testing
import pretrain_testing
import wikihop_testing
from etc_realformer.errors import UserInputError
from tasks.common import output_files
from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.common.pipeline import beam_pipeline
from tasks.common.pipeline import pipeline_task
from tasks.hotpotqa import preprocess as hotpot_preprocess
from tasks.nq import preprocess as nq_preprocess
from tasks.openkp import preprocess as openkp_preprocess
from tasks.pretrain import data as pretrain_data
from tasks.pretrain import features as pretrain_features
from tasks.pretrain import preprocess as pretrain_preprocess
from tasks.wikihop import preprocess as wikihop_preprocess
from tokenization_testing import write_test_vocab


TWO_WORKERS = ["--direct_num_workers=2",
               "--direct_running_mode=multi_processing"]


class Case:
  """A task's pipeline, its two input files (one with a bad record) and the
  single-process outputs of today's path (`baseline`)."""

  def __init__(self, task, files, baseline, ordered=True):
    self.task = task
    self.files = files
    self.baseline = baseline
    self.ordered = ordered  # One shard per output: the exact order too.


def _nq(root):
  files = synthetic.write_dataset(root, num_train=8, num_dev=4, seed=3,
                                  bad_train_lines=True)
  args = dict(vocab=files["vocab"], spm_model=None, long_seq_len=64,
              global_seq_len=24, stride=24, max_question_len=8)
  inputs = [files["train"], files["dev"]]
  base = os.path.join(root, "base")
  nq_preprocess.preprocess(inputs, base, nq_preprocess.make_featurizer(**args))
  return Case(nq_preprocess.NqPipeline(args), inputs, base)


def _file_case(root, preprocess, pipeline, args, inputs) -> Case:
  """A binary that writes one output per input file: its single-process
  outputs under root/base, and its pipeline task."""
  base = os.path.join(root, "base")
  featurizer = preprocess.make_featurizer(**args)
  for path in inputs:
    preprocess.preprocess_file(path, base, featurizer)
  return Case(pipeline(args), inputs, base)


def _wikihop(root):
  wikihop_testing.write_tiny_wikihop(root, num_train=6, num_dev=3)
  train = os.path.join(root, "train.json")
  with open(train) as f:
    recs = json.load(f)
  recs[2]["query"] = 7  # A bad record: wrong_type.
  with open(train, "w") as f:
    json.dump(recs, f)
  args = dict(vocab=os.path.join(root, "vocab.txt"), spm_model=None,
              long_seq_len=96, global_seq_len=24)
  inputs = [train, os.path.join(root, "dev.json")]
  return _file_case(root, wikihop_preprocess,
                    wikihop_preprocess.WikiHopPipeline, args, inputs)


def _hotpot(root):
  vocab = write_test_vocab(os.path.join(root, "vocab.txt"),
                           hotpotqa_testing.RELEASED_WORDS)
  inputs = []
  for name, items in (
      ("hotpot_train_v1.1.json",
       [hotpotqa_testing.released(i) for i in range(4)] +
       [hotpotqa_testing.released(4, answer="Oslo")]),  # answer_not_found
      ("hotpot_dev.json", [hotpotqa_testing.released(i) for i in range(3)] +
       [hotpotqa_testing.released(3, _id="e", question=" ")])):  # empty_text
    inputs.append(os.path.join(root, name))
    with open(inputs[-1], "w") as f:
      json.dump(items, f)
  args = dict(vocab=vocab, spm_model=None, long_seq_len=48, global_seq_len=16)
  return _file_case(root, hotpot_preprocess, hotpot_preprocess.HotpotPipeline,
                    args, inputs)


def _openkp(root):
  paths = openkp_testing.write_openkp_dir(root, num_train=6, num_dev=4,
                                          num_eval=0)
  with open(paths["Dev"], "a") as f:
    f.write("{not json\n")
  args = dict(vocab=paths["vocab"], spm_model=None, long_seq_len=64,
              global_seq_len=16)
  inputs = [paths["Train"], paths["Dev"]]
  return _file_case(root, openkp_preprocess, openkp_preprocess.OpenKPPipeline,
                    args, inputs)


def _pretrain(root):
  vocab = os.path.join(root, "vocab.txt")
  wikihop_testing.write_tiny_wikihop(root, num_train=1, num_dev=1)
  inputs = [pretrain_testing.write_corpus(os.path.join(root, "a.txt"), 6),
            pretrain_testing.write_corpus(os.path.join(root, "b.txt"), 6,
                                          seed=1)]
  with open(inputs[1], "ab") as f:
    f.write(b"\nw1 \xff .\n")  # A bad line: undecodable_text.
  args = dict(vocab_path=vocab, long_seq_len=pretrain_testing.LONG,
              global_seq_len=pretrain_testing.GLOBAL)
  settings = pretrain_preprocess.Settings(eval_fraction=0.25, num_shards=2)
  featurizer = pretrain_features.PretrainFeaturizer(**args)
  stats = record_stats.RecordStats(input_file=",".join(inputs), strict=False)
  base = os.path.join(root, "base")
  pretrain_preprocess.preprocess_documents(
      pretrain_data.read_documents(inputs, stats), featurizer, base,
      settings, stats,
      pretrain_preprocess.vocabulary_info(featurizer.tokenizer),
      {"input": inputs})
  task = pretrain_preprocess.PretrainPipeline(args, settings, inputs)
  return Case(task, inputs, base, ordered=False)


MAKERS = dict(nq=_nq, wikihop=_wikihop, hotpotqa=_hotpot, openkp=_openkp,
              pretrain=_pretrain)


@pytest.fixture(autouse=True)
def no_prism(monkeypatch):
  """Fails a test whose pipeline Beam's DirectRunner handed to the Prism
  runner (which it would first download from GitHub). The DirectRunner
  falls back to the FnApiRunner on any error there, so the attempt is
  recorded and checked here, not raised."""
  from apache_beam.runners.portability import prism_runner
  attempts = []

  def run_pipeline(self, pipeline, options):
    attempts.append(options)
    raise RuntimeError("the Prism runner is not for tests")

  monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", run_pipeline)
  yield
  assert not attempts, "a local run went to the Prism runner"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  """name -> its `Case`, built once per module."""
  cache = {}

  def get(name):
    if name not in cache:
      cache[name] = MAKERS[name](str(tmp_path_factory.mktemp(name)))
    return cache[name]
  return get


@pytest.fixture(scope="module", params=sorted(MAKERS))
def case(request, built):
  return built(request.param)


def _examples(directory):
  """file name -> its serialized examples, in order."""
  return {os.path.basename(p): [r.numpy() for r in
                                tf.data.TFRecordDataset(p)]
          for p in sorted(glob.glob(os.path.join(directory, "*.tfrecord")))}


def _reports(directory):
  """file name -> the JSON / jsonl reports, with the folder's name taken
  out (pre-training's stats name their shards)."""
  out = {}
  for path in glob.glob(os.path.join(directory, "*.json*")):
    with open(path, encoding="utf-8") as f:
      out[os.path.basename(path)] = f.read().replace(directory, "DIR")
  return out


def _assert_same_outputs(case, out):
  base, beam = _examples(case.baseline), _examples(out)
  assert sorted(beam) == sorted(base)
  everything = lambda ex: collections.Counter(r for v in ex.values()
                                              for r in v)
  assert everything(beam) == everything(base)
  assert sum(len(v) for v in base.values()) > 0
  if case.ordered:
    assert beam == base
  assert _reports(out) == _reports(case.baseline)
  # The bad record in one of the files: skipped and counted once.
  skipped = sum(json.loads(text).get("examples_skipped", 0) or
                sum(json.loads(text).get("skipped", {}).values())
                for name, text in _reports(out).items()
                if name.endswith(".json") and name != "nq_stats.json")
  assert skipped >= 1


def test_in_process_equals_single_process(case, tmp_path):
  out = str(tmp_path / "out")
  beam_pipeline.run(case.task, case.files, out)
  _assert_same_outputs(case, out)
  assert os.listdir(tmp_path) == ["out"]  # No work folder left behind.


# Worker processes start TensorFlow each (~10 s). Every task's pipeline
# is the same three DoFns (read, featurize, write a shard) around its
# featurizer, which the in-process runs above already pickle and run. Two
# kinds of run need workers of their own: two files on two workers, each
# worker reading and featurizing a file of its own (NQ, through its binary
# below), and pre-training's one group over all files with its records
# spread over both workers (here).
@pytest.mark.slow
def test_two_worker_processes_spread_records_equal_single_process(
    built, tmp_path):
  case = built("pretrain")
  out = str(tmp_path / "out")
  beam_pipeline.run(case.task, case.files, out, TWO_WORKERS,
                    spread_records=True)
  _assert_same_outputs(case, out)


@pytest.mark.slow
def test_binary_with_two_worker_processes(built, tmp_path):
  """The binary's classes live in `__main__`: the workers must get them by
  module name (`beam_pipeline.importable`)."""
  case = built("nq")
  args = case.task.featurizer_args
  out = str(tmp_path / "out")
  cli_testing.output(
      "tasks.nq.preprocess",
      [f"--input={','.join(case.files)}", f"--vocab={args['vocab']}",
       f"--output_dir={out}", f"--long_seq_len={args['long_seq_len']}",
       f"--global_seq_len={args['global_seq_len']}",
       f"--stride={args['stride']}",
       f"--max_question_len={args['max_question_len']}", *TWO_WORKERS],
      timeout=600)
  _assert_same_outputs(case, out)


def test_strict_fails_on_first_bad_record_without_output(built, tmp_path):
  case = built("wikihop")
  featurizer = case.task.make_featurizer()
  with pytest.raises(input_errors.BadRecordError) as single:
    wikihop_preprocess.preprocess_file(case.files[0], str(tmp_path / "one"),
                                       featurizer, strict=True)
  task = copy.copy(case.task)
  task.strict = True
  with pytest.raises(input_errors.BadRecordError) as beam:
    beam_pipeline.run(task, case.files, str(tmp_path / "out"))
  assert str(beam.value) == str(single.value)
  assert not (tmp_path / "out").exists()
  assert not os.listdir(tmp_path)  # Nor a work folder.


def test_merge_counts_sums_counts_and_keeps_settings():
  a = nq_preprocess.NqStats(input_file="f", examples_written=2,
                            settings={"seed": 1})
  a.windows_by_answer_type["null"] += 3
  b = nq_preprocess.NqStats(input_file="g", examples_written=5,
                            settings={"seed": 1})
  b.windows_by_answer_type["null"] += 1
  b.skipped["bad_json"] += 1
  pipeline_task.merge_counts(a, b)
  assert a.examples_written == 7 and a.input_file == "f"
  assert a.windows_by_answer_type["null"] == 4 and a.settings == {"seed": 1}
  assert a.skipped == {"bad_json": 1}


def test_binary_strict_is_one_line_and_leaves_no_output(tmp_path):
  root = str(tmp_path / "data")
  wikihop_testing.write_tiny_wikihop(root, num_train=2, num_dev=2)
  dev = os.path.join(root, "dev.json")
  with open(dev) as f:
    recs = json.load(f)
  recs[1]["candidates"] = "A"
  with open(dev, "w") as f:
    json.dump(recs, f)
  out = tmp_path / "out"
  cli_testing.user_error_line(
      "tasks.wikihop.preprocess",
      [f"--input={dev}", f"--vocab={root}/vocab.txt", f"--output_dir={out}",
       "--long_seq_len=96", "--global_seq_len=24", "--strict"],
      "field 'candidates'", "wrong_type")
  assert not out.exists()
  assert sorted(os.listdir(tmp_path)) == ["data"]


@pytest.mark.parametrize("option,texts", [
    ("--direct_num_wrkers=2", ("--direct_num_wrkers", "--direct_num_workers")),
    ("--runner=NoSuchRunner", ("NoSuchRunner", "DirectRunner")),
])
def test_bad_pipeline_option_is_a_user_error_before_anything_runs(
    built, tmp_path, option, texts):
  # The binary prints a UserInputError as one line with exit code 2
  # (`cli.guarded`; a Beam binary's one line: the strict test above).
  case = built("wikihop")
  with pytest.raises(UserInputError) as error:
    beam_pipeline.run(case.task, case.files, str(tmp_path / "out"),
                      [option])
  for text in texts:
    assert text in str(error.value)
  assert "\n" not in str(error.value).strip()
  assert not os.listdir(tmp_path)


def test_shard_names_one_file_keeps_the_single_process_name():
  assert pipeline_task.shard_names("dev.tfrecord", 1) == ["dev.tfrecord"]
  assert pipeline_task.shard_names("nq-dev-00.tfrecord", 2) == [
      "nq-dev-00-00000-of-00002.tfrecord", "nq-dev-00-00001-of-00002.tfrecord"]


def test_labelled_training_files_require_labels_in_training_files():
  calls = []

  class Task(pipeline_task.LabelledTrainingFiles):
    read_records = staticmethod(
        lambda path, stats, require_labels: calls.append(
            (path, stats, require_labels)) or ["record"])

  task, stats = Task(), record_stats.RecordStats()
  assert task.read("d/train.json", stats, "work") == ["record"]
  task.read("d/dev.json", stats, "work")
  task.is_training = True
  task.read("d/dev.json", stats, "work")
  assert calls == [("d/train.json", stats, True), ("d/dev.json", stats, False),
                   ("d/dev.json", stats, True)]


def test_run_and_print_prints_the_report_lines(monkeypatch, capsys):
  runs = []

  def run(*args):
    runs.append(args)
    return {}, ["a.json: read 1", "b.json: read 2"]

  monkeypatch.setattr(beam_pipeline, "run", run)
  beam_pipeline.run_and_print("task", ["a.json", "b.json"], "out", ["--x"])
  assert runs == [("task", ["a.json", "b.json"], "out", ["--x"])]
  assert capsys.readouterr().out == "a.json: read 1\nb.json: read 2\n"


@dataclasses.dataclass
class _TerminatedWikiHop(wikihop_preprocess.WikiHopPipeline):
  """A run that SIGTERM stops while it reads."""

  def read(self, unit, stats, work_dir):
    tf.io.gfile.makedirs(os.path.join(work_dir, "_parts"))
    os.kill(os.getpid(), signal.SIGTERM)
    return super().read(unit, stats, work_dir)


def test_sigterm_removes_the_work_folder(built, tmp_path):
  case = built("wikihop")
  task = _TerminatedWikiHop(**dataclasses.asdict(case.task))
  with pytest.raises(SystemExit) as stopped:
    beam_pipeline.run(task, case.files[1:], str(tmp_path / "out"))
  assert stopped.value.code == 128 + signal.SIGTERM
  assert not os.listdir(tmp_path)
  assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_full_disk_names_the_file_and_leaves_nothing(built, tmp_path,
                                                       monkeypatch):
  case = built("wikihop")

  full_disk_testing.fill_the_disk(monkeypatch)
  out = tmp_path / "out"
  with pytest.raises(output_files.OutputFileError,
                     match=r"_parts/dev.tfrecord\.[0-9a-f]+: cannot write "
                     r"output: No space left on device"):
    beam_pipeline.run(case.task, case.files[1:], str(out))
  assert not os.listdir(tmp_path)
