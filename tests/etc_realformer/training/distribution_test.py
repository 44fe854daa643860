"""Strategy and precision selection (the gin switches of
`training/distribution.py`), and MultiWorkerMirroredStrategy with two local
worker processes on loopback: both run the same `python -m tasks.run`
command with their own TF_CONFIG (127.0.0.1 ports only); the run finishes on
both, in lockstep, with the chief (worker 0) writing the checkpoints."""

import json
import os
import socket
import subprocess
import sys

import gin
import pytest
import tensorflow as tf
import tf_keras

import e2e_testing
from etc_realformer.training import distribution
import wikihop_testing


@pytest.fixture(autouse=True)
def clean():
  gin.clear_config()
  yield
  gin.clear_config()
  tf_keras.mixed_precision.set_global_policy("float32")


def test_strategy_selection():
  assert distribution.build_strategy("off") is tf.distribute.get_strategy()
  one = distribution.build_strategy("one_device")
  assert isinstance(one, tf.distribute.OneDeviceStrategy)
  with pytest.raises(ValueError, match="distribution_strategy"):
    distribution.build_strategy("parameter_server")


@pytest.mark.parametrize("name,policy", [
    (None, "float32"), ("bfloat16", "mixed_bfloat16"),
    ("float16", "mixed_float16")])
def test_precision_switch(name, policy):
  distribution.set_precision(name)
  assert tf_keras.mixed_precision.global_policy().name == policy
  with pytest.raises(ValueError, match="mixed_precision"):
    distribution.set_precision("int8")


def _free_ports(n):
  socks = []
  for _ in range(n):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
  ports = [s.getsockname()[1] for s in socks]
  for s in socks:
    s.close()
  return ports


@pytest.mark.slow
def test_two_workers_train_in_lockstep(tmp_path):
  data_dir = str(tmp_path / "data")
  wikihop_testing.write_tiny_wikihop(data_dir, num_train=16, num_dev=4)
  wikihop_testing.preprocess(data_dir)
  gin_file = wikihop_testing.tiny_gin(data_dir, str(tmp_path / "tiny.gin"), **{
      "etc_config.num_hidden_layers": 1,
      "TrainerConfig.train_steps": 6,
      "TrainerConfig.steps_per_loop": 3,
      "TrainerConfig.checkpoint_interval": 3,
  })
  model_dir = str(tmp_path / "model")
  ports = _free_ports(2)
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  procs = []
  for index in range(2):
    env = dict(e2e_testing.env(), TF_CONFIG=json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": index}}))
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "tasks.run", "--gin_file=tasks/wikihop.gin",
         f"--gin_file={gin_file}",
         "--gin_file=strategies/multi_worker_mirrored.gin",
         "--mode=train", f"--model_dir={model_dir}"],
        cwd=e2e_testing.REPO, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True))
  outputs = []
  try:
    for proc in procs:
      out, _ = proc.communicate(timeout=240)
      outputs.append(out)
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
  for proc, out in zip(procs, outputs):
    assert proc.returncode == 0, out[-4000:]
    # (MultiWorkerMirroredStrategy's class name.)
    assert "Strategy CollectiveAllReduceStrategy with 2 replicas" in out, out[-3000:]
    steps = wikihop_testing.progress(out)
    assert [s for s, _ in steps] == [3, 6], out[-3000:]
  # Same loss on both workers: the replicas train one model.
  assert wikihop_testing.progress(outputs[0]) == wikihop_testing.progress(outputs[1])
  assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-6")
  assert os.path.exists(os.path.join(model_dir, "operative_config.gin"))
