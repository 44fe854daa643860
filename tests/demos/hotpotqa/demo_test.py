"""Tests for demos/hotpotqa/demo.py: its gin config and closing lines."""

import gin

from demos.hotpotqa import demo
from demos.hotpotqa import synthetic
from etc_realformer.training import task as task_lib
from tasks import run
from tasks.hotpotqa import task as hotpotqa_task


def test_demo_gin_builds_the_hotpotqa_task_with_gold(tmp_path):
  path = tmp_path / "demo.gin"
  path.write_text(demo.demo_gin("/data", 10, 3))
  run.register_tasks()
  gin.clear_config()
  try:
    run.parse_gin([str(path)], [])
    task = task_lib.task_class()()
    steps = gin.query_parameter("TrainerConfig.train_steps")
  finally:
    gin.clear_config()
  assert type(task) is hotpotqa_task.HotpotQATask
  assert task.gold_file == f"/data/{synthetic.DEV_FILE}"
  assert task.input_patterns["eval"] == (
      "/data/hotpot_dev_distractor_v1.tfrecord")
  assert (task.long_seq_len, task.global_seq_len, task.seed, steps) == (
      demo.LONG_SEQ_LEN, demo.GLOBAL_SEQ_LEN, 3, 10)


def test_summary_lines():
  best = {"f1": 0.5, "sp_f1": 0.25, "joint_f1": 0.125, "joint_em": 0.0}
  lines = demo.summary_lines({
      "question": "Q?", "served": {"answer": "yes"}, "gold": "no",
      "official_best": best, "best_threshold": 0.4, "chance_joint_f1": 0.1,
      "export_path": "/e/1",
      "seconds": {"data": 1.0, "train_and_eval": 2.0, "total": 3.0}})
  assert lines[1] == "served answer (SavedModel serve_raw): 'yes'; gold: 'no'"
  assert lines[2] == (
      "dev (official metric, sp threshold 0.4): answer F1 0.5000, sp F1 "
      "0.2500, joint F1 0.1250 (joint EM 0.0000); question-blind chance "
      "joint F1 0.1000")
  assert len(lines) == 5
