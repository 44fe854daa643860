"""Tests for demos/pretrain/demo.py: its gin config, and its printed lines
on a tiny budget (a few documents and steps; the real bar is measured and
written in docs/pretraining.md, "The demo")."""

import re

import gin
import pytest

from demos.pretrain import demo
from etc_realformer.training import task as task_lib
from tasks import run
from tasks.pretrain import task as pretrain_task


def test_demo_gin_builds_the_pretraining_task(tmp_path):
  path = tmp_path / "demo.gin"
  path.write_text(demo.demo_gin(str(tmp_path), 500, 100, 3))
  run.register_tasks()
  gin.clear_config()
  try:
    run.parse_gin([str(path)], ["PretrainTask.train_stats_file = None",
                                "PretrainTask.mask_token_id = 5"])
    task = task_lib.task_class()()
    assert type(task) is pretrain_task.PretrainTask
    assert (task.long_seq_len, task.global_seq_len) == (
        demo.LONG_SEQ_LEN, demo.GLOBAL_SEQ_LEN)
    assert task.model_config.use_hard_g2l_mask
    assert task.model_config.residual_attention
    # Every CPC length has its own row of the length table.
    assert task.model_config.max_sentence_length_embeddings == (
        task.masking.cpc_max_sentence_len + 1)
    assert task.cpc_head.mlp_view_gradient_scale == 0.0
    assert (task.mlm_weight, task.cpc_weight) == (0.8, 0.2)
    assert gin.query_parameter("optimizer.optimizer_type") == "lamb"
    assert task.seed == 3
  finally:
    gin.clear_config()


@pytest.mark.slow
def test_demo_prints_its_lines_on_a_tiny_budget(tmp_path):
  """The whole demo in this process (a binary start imports TensorFlow
  again) on its first documents, one layer and one step."""
  try:
    summary = demo.run_demo(str(tmp_path), train_steps=1, max_documents=30,
                            gin_bindings=[
                                "TrainerConfig.jit_compile = False",
                                "TrainerConfig.steps_per_loop = 1",
                                "etc_config.num_hidden_layers = 1"])
  finally:
    gin.clear_config()
  number = r"\d\.\d{4}"
  mlm, cpc, cpc_parts, timing = demo.summary_lines(summary)
  assert re.fullmatch(rf"pretrain \| mlm accuracy: {number} \(most-frequent-"
                      rf"token baseline: {number}\)", mlm), mlm
  assert re.fullmatch(rf"pretrain \| cpc accuracy: {number} \(chance: "
                      rf"{number}, length-only baseline: {number}\)", cpc), cpc
  assert re.fullmatch(
      rf"pretrain \| cpc picks of the masked sentence's length: {number}; "
      rf"cpc accuracy among them: {number} \(length-only baseline: "
      rf"{number}\)", cpc_parts), cpc_parts
  assert timing.startswith("pretrain | wall time: ")
  scores = summary["official"]
  # Measured on held-out documents, never fixed: chance is 1 / candidates,
  # and the length-only baseline is at least chance.
  assert scores["mlm_predictions"] > 0 and scores["cpc_sentences"] > 0
  assert 0 < scores["cpc_chance"] <= scores["cpc_length_baseline"] <= 1
  assert 0 < scores["mlm_most_frequent_baseline"] < 1
  assert (tmp_path / "demo_results.json").exists()
