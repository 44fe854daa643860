"""`run_experiment` under the loop's gin switches on the real WikiHop model:
float16 with loss scaling, bfloat16, XLA and gradient accumulation, a few
steps each."""

import json
import os

import gin
import numpy as np
import pytest
import tf_keras

from tasks import run
import wikihop_testing


@pytest.fixture(scope="module")
def tiny_gin(tmp_path_factory):
  root = tmp_path_factory.mktemp("switches")
  data_dir = str(root / "data")
  wikihop_testing.write_tiny_wikihop(data_dir, num_train=16, num_dev=8)
  wikihop_testing.preprocess(data_dir)
  return wikihop_testing.tiny_gin(data_dir, str(root / "tiny.gin"), **{
      "etc_config.num_hidden_layers": 1,
      "TrainerConfig.train_steps": 4,
      "TrainerConfig.steps_per_loop": 2,
      "TrainerConfig.checkpoint_interval": 4,
      "TrainerConfig.eval_interval": 4,
  })


@pytest.mark.parametrize("bindings", [
    ["precision.mixed_precision = 'float16'"],
    ["precision.mixed_precision = 'bfloat16'",
     "TrainerConfig.grad_accum_steps = 2"],
    # XLA compilation on a shared CPU takes a minute or more.
    pytest.param(["TrainerConfig.jit_compile = True"],
                 marks=pytest.mark.slow),
], ids=["fp16_loss_scale", "bf16_accumulate", "xla"])
def test_switch_trains_and_evaluates(tiny_gin, tmp_path, bindings):
  run.register_tasks()
  gin.clear_config()
  try:
    run.parse_gin(["tasks/wikihop.gin", tiny_gin], bindings)
    results = run.run("train_and_eval", str(tmp_path / "model"))
  finally:
    gin.clear_config()
    tf_keras.mixed_precision.set_global_policy("float32")
  assert results["global_step"] == 4
  assert np.isfinite(results["loss"])
  assert 0.0 <= results["accuracy"] <= 1.0
  with open(os.path.join(tmp_path, "model", "operative_config.gin")) as f:
    operative = f.read()
  for binding in bindings:
    assert binding.replace(" ", "") in operative.replace(" ", "")
  with open(os.path.join(tmp_path, "model", "eval_results.json")) as f:
    assert json.load(f)["step"] == 4
