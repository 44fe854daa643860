"""Tests for tasks.wikihop.preprocess: the cache and its stats, strict mode,
and the binary's one-line errors (exit code 2) for a user's mistakes."""

import json
import os

import pytest

import cli_testing
from etc_realformer.data import tfrecords
from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.common.pipeline import preprocessing
from tasks.wikihop import data
from tasks.wikihop import features as F
from tasks.wikihop import preprocess
from tokenization_testing import write_test_vocab

GOOD = dict(id="g0", query="country_of x", candidates=["A", "b"], answer="b ",
            supports=["x is in b."])
WORDS = ["a", "b", "x", "is", "in", "country", "of"]


def _write(path, recs):
  path.write_text(json.dumps(recs))
  return str(path)


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return write_test_vocab(tmp_path_factory.mktemp("v") / "vocab.txt", WORDS)


def test_preprocess_writes_records_and_stats(tmp_path, vocab):
  long_doc = " ".join(["x is in b."] * 6)
  recs = [GOOD, dict(GOOD, id="t0", supports=[long_doc, "a is in x."]),
          dict(GOOD, id="a0", answer="zz"),
          dict(GOOD, id="o0", candidates=["a"] * 9, answer="a")]
  path = _write(tmp_path / "dev.json", recs)
  featurizer = preprocess.make_featurizer(vocab, None, long_seq_len=24,
                                          global_seq_len=8)
  stats = preprocess.preprocess_file(path, str(tmp_path / "out"), featurizer)
  record_path, stats_path = preprocessing.output_paths(
      path, str(tmp_path / "out"))
  assert record_path.endswith("dev.tfrecord")
  with open(stats_path) as f:
    written = json.load(f)
  assert written == stats.to_dict()
  assert written["examples_read"] == 4
  assert written["examples_written"] == 2
  assert written["examples_truncated"] == 1
  assert written["truncation"]["sentences_dropped"] > 0
  assert "overflow" not in written["truncation"]
  assert written["skipped"] == {data.ANSWER_NOT_IN_CANDIDATES: 1,
                                data.TOO_LONG: 1}
  assert [(s["id"], s["field"]) for s in written["skipped_records"]] == [
      ("a0", "answer"), ("o0", "candidates")]
  ids = [f["example_id"] for f in tfrecords.make_dataset(
      record_path, F.feature_spec(24, 8)).as_numpy_iterator()]
  assert ids == [b"g0", b"t0"]
  with pytest.raises(input_errors.BadRecordError, match="'o0'.*too_long"):
    preprocess.preprocess_file(
        _write(tmp_path / "o.json", [GOOD, recs[3]]), str(tmp_path / "o"),
        featurizer, strict=True)
  assert not os.path.exists(tmp_path / "o" / "o.tfrecord")


def test_global_token_ids_flag_values(vocab):
  featurizer = preprocess.make_featurizer(
      vocab, None, 20, 8, global_token_ids=["7", "8", "9", "10"])
  assert featurizer.global_token_ids == F.GlobalTokenIds(
      sentence=7, question=8, candidate=9, paragraph=10)
  with pytest.raises(ValueError, match="sentence,question,candidate,para"):
    preprocess.make_featurizer(vocab, None, 20, 8, global_token_ids=["7"])


# The binary, given a user's mistake: (what to write, the flags, the file the
# one-line error must name, text it must hold).
def _cli_cases(root, vocab):
  good = _write(root / "dev.json", [GOOD])
  truncated = root / "truncated.json"
  truncated.write_text(json.dumps([GOOD])[:-7])
  duplicate_vocab = root / "dup_vocab.txt"
  with open(vocab) as f:
    duplicate_vocab.write_text(f.read() + "of\n")
  strict = _write(root / "strict.json",
                  [GOOD, dict(GOOD, id="bad7", answer="zz")])
  repeated = _write(root / "repeated.json",
                    [GOOD, dict(GOOD, answer="A"), dict(GOOD, answer="A")])
  hotpot = _write(root / "hotpot_dev.json", [
      {"_id": f"h{i}", "question": "Who?", "answer": "b",
       "context": [["T", ["x is in b."]]], "supporting_facts": [["T", 0]]}
      for i in range(3)])
  nuls = root / "nuls.json"
  nuls.write_bytes(b"\0" * 64)
  regular = root / "regular_file"
  regular.write_text("x")
  return {
      "duplicate_ids": ([f"--input={repeated}", f"--vocab={vocab}"],
                        repeated, "id 'g0' is duplicated: record #0 and "
                        "record #1"),
      "other_task_file": ([f"--input={hotpot}", f"--vocab={vocab}"], hotpot,
                          "no example written: read 3 records, skipped or "
                          "dropped: missing_field 3"),
      "binary_garbage": ([f"--input={nuls}", f"--vocab={vocab}"], nuls,
                         "not valid JSON"),
      "input_is_a_directory": ([f"--input={root}", f"--vocab={vocab}"], root,
                               "is a directory"),
      "output_under_a_file": ([f"--input={good}", f"--vocab={vocab}",
                               f"--output_dir={regular}/out"], regular,
                              "is a regular file"),
      "missing_input": ([f"--input={root / 'missing.json'}",
                         f"--vocab={vocab}"], root / "missing.json",
                        "cannot read input file"),
      "truncated_json": ([f"--input={truncated}", f"--vocab={vocab}"],
                         truncated, "not valid JSON"),
      "duplicate_vocab": ([f"--input={good}", f"--vocab={duplicate_vocab}"],
                          duplicate_vocab, "token 'of' already on line"),
      "strict_bad_record": ([f"--input={strict}", f"--vocab={vocab}",
                             "--strict"], strict,
                            "record 'bad7', field 'answer': "
                            "answer_not_in_candidates"),
      "no_input_flag": ([f"--vocab={vocab}"], None, "--input is required"),
  }


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory, vocab):
  """Every case's (exit code, stdout, stderr, case): the one that reads the
  most (a bad record under --strict) in a process of its own, as a user
  runs it, the others in this process."""
  root = tmp_path_factory.mktemp("cli")
  cases = _cli_cases(root, vocab)
  out = {}
  for name, (args, _, _) in cases.items():
    if not any(a.startswith("--output_dir=") for a in args):
      args.append(f"--output_dir={root / name}")
    args += ["--long_seq_len=32", "--global_seq_len=16"]
    run = (cli_testing.run if name == "strict_bad_record"
           else cli_testing.run_here)
    proc = run("tasks.wikihop.preprocess", args)
    out[name] = (proc.returncode, proc.stdout, proc.stderr, cases[name])
  out["root"] = root
  return out


@pytest.mark.parametrize("case", ["missing_input", "truncated_json",
                                  "duplicate_vocab", "strict_bad_record",
                                  "no_input_flag", "duplicate_ids",
                                  "other_task_file", "binary_garbage",
                                  "input_is_a_directory",
                                  "output_under_a_file"])
def test_cli_user_mistake_is_one_line_and_exit_code_2(cli_runs, case):
  returncode, stdout, stderr, (_, path, text) = cli_runs[case]
  cli_testing.assert_user_error(returncode, stderr, text,
                                *([str(path)] if path else []))
  assert not stdout
  # Nothing written, no work folder left.
  assert not [p for p in os.listdir(cli_runs["root"]) if p.startswith(case)]


def test_cli_skip_duplicate_ids_keeps_the_first_and_counts_the_rest(
    tmp_path, vocab):
  recs = [GOOD, dict(GOOD, answer="A"), dict(GOOD, id="g1"),
          dict(GOOD, answer="A")]
  path = _write(tmp_path / "dev.json", recs)
  out = tmp_path / "out"
  stdout = cli_testing.output_here("tasks.wikihop.preprocess", [
      f"--input={path}", f"--vocab={vocab}", f"--output_dir={out}",
      "--long_seq_len=32", "--global_seq_len=16", "--skip_duplicate_ids"])
  assert "read 4, written 2" in stdout and "'duplicate_id': 2" in stdout
  stats = record_stats.read_stats_json(str(out / "dev.stats.json"))
  assert [(s["id"], s["detail"]) for s in stats["skipped_records"]] == [
      ("g0", "record #1 repeats record #0"),
      ("g0", "record #3 repeats record #0")]
  ids = [f["example_id"] for f in tfrecords.make_dataset(
      str(out / "dev.tfrecord"), F.feature_spec(32, 16)).as_numpy_iterator()]
  assert ids == [b"g0", b"g1"]
  assert sorted(os.listdir(tmp_path)) == ["dev.json", "out"]
