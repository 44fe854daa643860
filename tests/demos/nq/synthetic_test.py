"""Tests for demos.nq.synthetic: released formats, every case, determinism,
the binary."""

import collections
import gzip
import json
import subprocess
import sys

import pytest

from demos.nq import synthetic
import cli_testing
import e2e_testing
from tasks.common.inputs import record_stats
from tasks.nq import data
from tasks.nq import features as F


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  return synthetic.write_dataset(str(tmp_path_factory.mktemp("nq")),
                                 num_train=40, num_dev=40, seed=0)


def _raw(path):
  with gzip.open(path, "rt", encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def test_files_pass_the_reader(files):
  for split in ("train", "dev", "simplified_train"):
    stats = record_stats.RecordStats(input_file=files[split], strict=True)
    got = list(data.read_records(files[split], stats=stats))
    assert len(got) == 40 and stats.num_skipped == 0
  train = list(data.read_records(files["train"]))
  simple = list(data.read_records(files["simplified_train"]))
  assert all(r.format == data.FULL for r in train)
  assert all(r.format == data.SIMPLIFIED for r in simple)
  for a, b in zip(train, simple):
    assert a.tokens == b.tokens and a.token_is_html == b.token_is_html
    assert data.labels_of(a) == data.labels_of(b)


def test_exact_released_formats(files):
  text_utils = pytest.importorskip("natural_questions.text_utils")
  eval_utils = pytest.importorskip("natural_questions.eval_utils")
  train = _raw(files["train"])
  for record in train:
    assert set(record) >= {"example_id", "question_text", "document_url",
                           "document_html", "document_tokens",
                           "long_answer_candidates", "annotations"}
    html = record["document_html"].encode("utf-8")
    for t in record["document_tokens"]:
      assert set(t) == {"token", "start_byte", "end_byte", "html_token"}
      assert html[t["start_byte"]:t["end_byte"]].decode() == t["token"]
    for c in record["long_answer_candidates"]:
      assert set(c) == {"start_token", "end_token", "start_byte", "end_byte",
                        "top_level"}
    assert len(record["annotations"]) == 1
  # The simplified file is what the official simplifier makes.
  simplified = _raw(files["simplified_train"])
  for full, simple in zip(train, simplified):
    assert simple == text_utils.simplify_nq_example(json.loads(json.dumps(
        full)))
  # The official scorer reads the dev gold.
  gold = eval_utils.read_annotation_from_one_split(files["dev"])
  assert len(gold) == 40 and all(len(v) == 5 for v in gold.values())


def test_every_case_is_present(files):
  train = list(data.read_records(files["train"]))
  dev = list(data.read_records(files["dev"]))
  types = collections.Counter(data.labels_of(r).answer_type for r in train)
  for t in (data.NULL, data.LONG, data.SHORT):
    assert types[t] > 0, types
  assert types[data.YES] + types[data.NO] > 0
  # Nested candidates, HTML tokens, tokens outside every candidate.
  for r in train:
    assert any(not c.top_level for c in r.candidates)
    assert any(r.token_is_html)
    assert r.tokens[0] == "<H1>"
  # Some long answers are nested candidates (table rows).
  assert any(not r.candidates[r.annotations[0].candidate_index].top_level
             for r in train if r.annotations[0].candidate_index >= 0)
  # Dev: 5 annotators with varied agreement (the scorer's 2-of-5 rule).
  answering = collections.Counter(
      sum(not a.long_answer.is_null for a in r.annotations) for r in dev)
  assert answering[0] > 0 and answering[1] > 0
  assert sum(v for k, v in answering.items() if k >= 2) > 0
  assert len(answering) >= 4, answering


def test_answers_follow_the_question(files):
  """The short answer is the value after the asked attribute; the long
  answer holds the question's attribute and entity."""
  for r in data.read_records(files["train"]):
    labels = data.labels_of(r)
    words = r.question.split()
    if labels.answer_type == data.SHORT:
      s, e = labels.short_span
      value = r.tokens[s]
      assert e == s + 1
      long_text = r.tokens[labels.long_span[0]:labels.long_span[1]]
      assert words[3] in long_text and value in long_text
    if labels.answer_type == data.NULL:
      assert not any(t == words[3] for t in r.tokens)


def test_multi_window_with_answers_outside_some_windows(files):
  featurizer = F.NqFeaturizer(files["vocab"], long_seq_len=64,
                              global_seq_len=24, stride=24,
                              max_question_len=8)
  window_counts, outside = [], 0
  for r in list(data.read_records(files["train"]))[:12]:
    feats, stats = featurizer.featurize_record(r)
    window_counts.append(stats["windows"])
    assert stats["question_tokens_dropped"] == 0
    assert (feats["token_ids"] != 100).all()  # every word in the vocab
    if data.labels_of(r).answer_type in (data.SHORT, data.LONG):
      outside += int((feats["answer_type"] == data.NULL).sum())
      assert (feats["answer_type"] != data.NULL).any()  # inside one window
  assert min(window_counts) >= 3
  assert outside > 0


def test_deterministic_for_a_seed(tmp_path):
  a = synthetic.write_dataset(str(tmp_path / "a"), 5, 5, seed=4)
  b = synthetic.write_dataset(str(tmp_path / "b"), 5, 5, seed=4)
  c = synthetic.write_dataset(str(tmp_path / "c"), 5, 5, seed=5)
  for name in ("train", "dev", "simplified_train", "vocab"):
    with open(a[name], "rb") as x, open(b[name], "rb") as y:
      assert x.read() == y.read(), name
  assert _raw(a["train"]) != _raw(c["train"])
  # The vocabulary does not depend on the seed; the original ids hold.
  vocab = synthetic.vocabulary()
  assert vocab[101] == "[CLS]" and vocab[107] == "[unused102]"
  assert vocab[108] == "[unused103]" and vocab[35] == "[unused34]"


def test_binary_writes_the_files_and_needs_an_output_dir(tmp_path):
  out = cli_testing.output_here(
      "demos.nq.synthetic", [f"--output_dir={tmp_path}", "--num_train=2",
                             "--num_dev=1"])
  paths = json.loads(out[out.index("{"):out.index("}") + 1])
  assert sorted(paths) == ["dev", "simplified_train", "train", "vocab"]
  assert len(list(data.read_records(paths["dev"]))) == 1
  proc = subprocess.run([sys.executable, "-m", "demos.nq.synthetic"],
                        cwd=e2e_testing.REPO, capture_output=True, text=True,
                        env=dict(e2e_testing.env(), TF_CPP_MIN_LOG_LEVEL="3"),
                        timeout=300)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == ["error: --output_dir is required"]
