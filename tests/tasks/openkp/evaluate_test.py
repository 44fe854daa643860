"""Tests for tasks.openkp.evaluate (the official metric) on hand-computed
cases, its file reader and its CLI (the in-graph twin is tested with the
task)."""

import json
import subprocess
import sys

import pytest

import cli_testing
import e2e_testing
from etc_realformer.errors import UserInputError
from tasks.openkp import evaluate as E


def test_one_document_by_hand():
  # Gold {a, b, c}; predictions a (hit), x, b (hit), y, c (hit).
  p, r, f = E.score_document(["a", "x", "b", "y", "c"], ["a", "b", "c"])
  assert p == pytest.approx([1, 1 / 2, 2 / 3, 2 / 4, 3 / 5])
  assert r == pytest.approx([1 / 3, 1 / 3, 2 / 3, 2 / 3, 1])
  # F1@1 = 2 * 1 * 1/3 / (4/3) = 0.5; F1@3 = 2/3; F1@5 = 2*.6/1.6 = 0.75.
  assert [f[0], f[2], f[4]] == pytest.approx([0.5, 2 / 3, 0.75])


def test_fewer_predictions_still_divide_by_k():
  p, r, f = E.score_document(["a"], ["a"])
  assert p == pytest.approx([1, 1 / 2, 1 / 3, 1 / 4, 1 / 5])
  assert r == [1.0] * 5
  assert f[2] == pytest.approx(2 * (1 / 3) / (4 / 3))  # 0.5


def test_repeated_predictions_count_once_after_normalization():
  # The official script de-duplicates the normalized predictions (first
  # occurrence kept, in order) before the cut at k: "Foo", "foo", "FOO"
  # are one prediction, so "bar" moves up to rank 2.
  references = {"u": [["foo"], ["bar"]]}
  predictions = {"u": [["Foo"], ["foo"], ["FOO"], ["bar"]]}
  out = E.evaluate(references, predictions)
  # Ranked: foo (hit), bar (hit); 2 gold.
  assert out["precision@1"] == pytest.approx(1.0)
  assert out["recall@1"] == pytest.approx(1 / 2)
  assert out["f1@1"] == pytest.approx(2 / 3)
  assert out["precision@3"] == pytest.approx(2 / 3)   # counting repeats: 1
  assert out["recall@3"] == pytest.approx(1.0)        # counting repeats: 3/2
  assert out["f1@3"] == pytest.approx(0.8)
  assert out["precision@5"] == pytest.approx(2 / 5)   # counting repeats: 4/5
  assert out["recall@5"] == pytest.approx(1.0)        # counting repeats: 2
  assert out["f1@5"] == pytest.approx(2 * 0.4 / 1.4)
  # A repeat of a miss takes no rank either.
  p, r, _ = E.score_document(["x", "x", "a"], ["a"])
  assert p[:2] == pytest.approx([0, 1 / 2]) and r[1] == 1.0


def test_averaged_per_document_with_official_normalization():
  references = {
      "u1": [["Machine", "Learning"], ["TF"]],
      "u2": [["x"]],
      "u3": [["gold"]],          # no prediction at all: scores 0
      "u4": [[""], []],          # no usable gold: left out
  }
  predictions = {
      # Case-insensitive; "learning " is right-stripped; [""] is dropped.
      "u1": [[""], ["machine learning "], ["tf"]],
      "u2": [["y"], ["x"]],
  }
  out = E.evaluate(references, predictions)
  assert out["num_documents"] == 3
  assert out["missing_predictions"] == 1 and out["empty_references"] == 1
  # u1: hits at ranks 1, 2 of 2 gold; u2: hit at rank 2 of 1 gold; u3: none.
  assert out["precision@1"] == pytest.approx((1 + 0 + 0) / 3)
  assert out["recall@1"] == pytest.approx((0.5 + 0 + 0) / 3)
  assert out["f1@1"] == pytest.approx((2 / 3 + 0 + 0) / 3)
  assert out["precision@3"] == pytest.approx((2 / 3 + 1 / 3 + 0) / 3)
  assert out["recall@3"] == pytest.approx((1 + 1 + 0) / 3)
  assert out["f1@3"] == pytest.approx((0.8 + 0.5 + 0) / 3)
  assert out["precision@5"] == pytest.approx((2 / 5 + 1 / 5 + 0) / 3)
  assert out["f1@5"] == pytest.approx(
      (2 * 0.4 / 1.4 + 2 * 0.2 / 1.2 + 0) / 3)


def test_cli_scores_files(tmp_path):
  ref = tmp_path / "ref.jsonl"
  pred = tmp_path / "pred.jsonl"
  ref.write_text(json.dumps({"url": "u", "text": "t",
                             "KeyPhrases": [["a", "b"]]}) + "\n")
  pred.write_text(json.dumps({"url": "u", "KeyPhrases": [["a b"]]}) + "\n")
  assert E.evaluate_files(str(ref), str(pred))["f1@1"] == 1.0
  out = tmp_path / "m.json"
  proc = subprocess.run(
      [sys.executable, "-m", "tasks.openkp.evaluate", f"--reference={ref}",
       f"--predictions={pred}", f"--output={out}"],
      cwd=e2e_testing.REPO, env=e2e_testing.env(), capture_output=True,
      text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert json.loads(out.read_text())["precision@1"] == 1.0


def test_malformed_files_name_the_file_line_and_field(tmp_path):
  cut = tmp_path / "cut.jsonl"
  cut.write_text('{"url": "u", "KeyPhrases": [["a"]]}\n{"url": "v", "Key')
  with pytest.raises(UserInputError, match="cut.jsonl: line 2"):
    E.read_keyphrases(str(cut))
  no_url = tmp_path / "no_url.jsonl"
  no_url.write_text('{"KeyPhrases": [["a"]]}\n')
  with pytest.raises(UserInputError, match="no_url.jsonl: line 1, field 'url'"):
    E.read_keyphrases(str(no_url))


def test_a_directory_an_empty_file_and_conflicting_urls_are_refused(
    tmp_path):
  ref = tmp_path / "ref.jsonl"
  ref.write_text(json.dumps({"url": "u", "KeyPhrases": [["a"]]}) + "\n")
  # The binary: one line naming the directory, no all-zero metrics.
  cli_testing.user_error_line_here(
      "tasks.openkp.evaluate",
      [f"--reference={tmp_path}", f"--predictions={ref}"],
      f"{tmp_path}: is a directory")
  empty = tmp_path / "empty.jsonl"
  empty.write_text("\n")
  with pytest.raises(UserInputError, match="empty.jsonl: holds no documents"):
    E.evaluate_files(str(ref), str(empty))
  nuls = tmp_path / "nuls.jsonl"
  nuls.write_bytes(b"\0" * 32)
  with pytest.raises(UserInputError, match="nuls.jsonl: line 1: not valid"):
    E.read_keyphrases(str(nuls))
  twice = tmp_path / "twice.jsonl"
  same = json.dumps({"url": "u", "KeyPhrases": [["a"]]})
  twice.write_text("\n".join([same, json.dumps({"url": "v"}), same]) + "\n")
  assert E.read_keyphrases(str(twice)) == {"u": [["a"]], "v": []}
  twice.write_text("\n".join(
      [same, json.dumps({"url": "u", "KeyPhrases": [["b"]]})]) + "\n")
  with pytest.raises(UserInputError,
                     match=r"twice.jsonl: url 'u' is duplicated with "
                     r"different KeyPhrases: line 1 and line 2"):
    E.read_keyphrases(str(twice))
