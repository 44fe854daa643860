"""Tests for demos/wikihop/demo.py: its gin config (the default and
--bridge_scaffold) and its closing lines."""

import gin
import pytest

from demos.wikihop import demo
from demos.wikihop import scaffold
from demos.wikihop import synthetic
from etc_realformer.training import task as task_lib
from tasks import run
from tasks.common.featurization import tokenization
from tasks.wikihop import task as wikihop_task


@pytest.fixture()
def data_dir(tmp_path):
  tokenization.write_vocab(str(tmp_path / "vocab.txt"),
                           synthetic.vocabulary())
  return str(tmp_path)


def _task(gin_text, tmp_path):
  """The task the demo's gin config builds, and some of its values."""
  path = tmp_path / "demo.gin"
  path.write_text(gin_text)
  run.register_tasks()
  gin.clear_config()
  try:
    run.parse_gin([str(path)], [])
    return task_lib.task_class()(), {
        name: gin.query_parameter(name)
        for name in ("etc_config.num_hidden_layers", "optimizer.epsilon",
                     "optimizer.learning_rate")}
  finally:
    gin.clear_config()


def test_default_demo_types_the_subject_without_a_scaffold(data_dir,
                                                           tmp_path):
  task, params = _task(demo.demo_gin(data_dir, 10, 0), tmp_path)
  assert type(task) is wikihop_task.WikiHopTask
  # docs/wikihop_demo.md, "Adam epsilon 1e-8": 1e-6 left the demo at chance.
  assert params["optimizer.epsilon"] == 1e-8
  # docs/wikihop_demo.md, "Learning rate 5e-4": 1e-3 left chance later or
  # never.
  assert params["optimizer.learning_rate"] == 5e-4
  assert task.mark_query_subject
  assert task.build_featurizer().mark_query_subject  # serving featurizes so
  assert params["etc_config.num_hidden_layers"] == 4
  assert (task.long_seq_len, task.global_seq_len) == (demo.LONG_SEQ_LEN,
                                                      demo.GLOBAL_SEQ_LEN)


def test_bridge_scaffold_demo_types_the_subject_and_fades_the_bridge(
    data_dir, tmp_path):
  task, params = _task(
      demo.demo_gin(data_dir, 10, 7, bridge_scaffold=True), tmp_path)
  assert isinstance(task, scaffold.WikiHopBridgeScaffoldTask)
  assert task.name == "wikihop_bridge_scaffold"
  # The WikiHopTask bindings apply to the scaffold's task too.
  assert task.mark_query_subject
  assert (task.long_seq_len, task.seed) == (demo.LONG_SEQ_LEN, 7)
  marks = task.build_marks()
  assert (marks.hold_steps, marks.fade_steps, marks.floor, marks.seed) == (
      300, 1000, 0.5, 7)
  assert params["etc_config.num_hidden_layers"] == 4


def test_summary_lines():
  lines = demo.summary_lines({
      "query": "country_of x", "answer": "b", "gold": "b",
      "probabilities": {"a": 0.25, "b": 0.75}, "dev_accuracy": 0.5,
      "global_step": 10, "dev_loss": 1.0, "export_path": "/e/1",
      "seconds": {"data": 1.0, "train_and_eval": 2.0, "total": 3.0}})
  assert lines == [
      "query: 'country_of x'",
      "served answer (SavedModel serve_raw): 'b' (p=0.750); gold: 'b'",
      "dev accuracy: 0.5000 (step 10, dev loss 1.0000)",
      "wall time: 3 s (data 1 s, train+eval 2 s)",
      "SavedModel: /e/1"]
