"""MultiWorkerMirroredStrategy: two local worker processes on loopback.

Both run the same `python -m tasks.run` command with their own TF_CONFIG
(127.0.0.1 ports only) and the multi_worker_mirrored strategy gin file; the
run must finish on both, in lockstep, with the chief (worker 0) writing the
checkpoints to model_dir and worker 1 keeping nothing there.
"""

import json
import os
import socket
import subprocess
import sys

import pytest

from tests import test_run_wikihop_e2e as e2e


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
  e2e.write_tiny_wikihop(data_dir, num_train=16, num_dev=4)
  e2e.preprocess(data_dir)
  gin_file = e2e.tiny_gin(data_dir, str(tmp_path / "tiny.gin"), **{
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
    env = dict(e2e._env(), TF_CONFIG=json.dumps(  # pylint: disable=protected-access
        {"cluster": cluster, "task": {"type": "worker", "index": index}}))
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "tasks.run", "--gin_file=tasks/wikihop.gin",
         f"--gin_file={gin_file}",
         "--gin_file=strategies/multi_worker_mirrored.gin",
         "--mode=train", f"--model_dir={model_dir}"],
        cwd=e2e.REPO, env=env, stdout=subprocess.PIPE,
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
    steps = e2e.progress(out)
    assert [s for s, _ in steps] == [3, 6], out[-3000:]
  # Same loss on both workers: the replicas train one model.
  assert e2e.progress(outputs[0]) == e2e.progress(outputs[1])
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-6")
  assert os.path.exists(os.path.join(model_dir, "operative_config.gin"))
