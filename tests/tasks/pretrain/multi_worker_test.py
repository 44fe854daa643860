"""Pre-training on two local workers (MultiWorkerMirroredStrategy on
loopback), killed with SIGKILL and resumed.

Both workers run the same `python -m tasks.pretrain` command with their own
TF_CONFIG (127.0.0.1 ports only). Once the chief (worker 0) has written a
checkpoint past step 4, both are killed with SIGKILL, as a preempted job
is; the same two commands then resume from the last complete checkpoint
and finish in lockstep: both workers print the same losses (the replicas
train one model, each reading its own input pipeline, masked with its own
seeds), and the chief writes the last checkpoint.

This is the spine's multi-worker test (the same runner and trainer serve
every task); pre-training is where users outgrow one machine.
"""

import json
import signal
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

import e2e_testing
import pretrain_testing

TRAIN_STEPS = 40


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


def _start_workers(command, ports, logs, scratch):
  """The workers, their temporary files (the non-chief's scratch
  checkpoints, which a killed worker leaves) under `scratch`."""
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  procs = []
  for index, log in enumerate(logs):
    env = dict(e2e_testing.env(), TMPDIR=scratch, TF_CONFIG=json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": index}}))
    procs.append(subprocess.Popen(
        [sys.executable, "-m", *command], cwd=e2e_testing.REPO, env=env,
        stdout=log, stderr=subprocess.STDOUT))
  return procs


def _read(path):
  with open(path) as f:
    return f.read()


@pytest.mark.slow
def test_two_workers_pretrain_killed_and_resumed(tmp_path):
  paths = pretrain_testing.write_data(str(tmp_path / "pt"), num_docs=16)
  gin_file = e2e_testing.write_gin(
      str(tmp_path / "pretrain.gin"),
      pretrain_testing.tiny_gin_lines(paths, TRAIN_STEPS, num_layers=1) + [
          "TrainerConfig.steps_per_loop = 4",
          "TrainerConfig.checkpoint_interval = 4",
      ])
  model_dir = str(tmp_path / "model")
  command = ["tasks.pretrain", f"--gin_file={gin_file}",
             "--gin_file=strategies/multi_worker_mirrored.gin",
             "--mode=train", f"--model_dir={model_dir}"]

  # 1. Both workers start; SIGKILL both once a checkpoint past step 4 exists.
  killed_logs = [str(tmp_path / f"killed_{i}.log") for i in range(2)]
  files = [open(p, "w") for p in killed_logs]
  scratch = str(tmp_path)
  procs = _start_workers(command, _free_ports(2), files, scratch)
  killed_after = None
  try:
    deadline = time.time() + 200
    while time.time() < deadline and all(p.poll() is None for p in procs):
      step = e2e_testing.latest_checkpoint_step(model_dir)
      if step is not None and step >= 8:
        for p in procs:
          p.send_signal(signal.SIGKILL)
        killed_after = step
        break
      time.sleep(0.05)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
      p.wait(timeout=30)
    for f in files:
      f.close()
  killed = [_read(p) for p in killed_logs]
  assert killed_after is not None, (
      "the run ended or stalled before it could be killed:\n" +
      "\n----\n".join(k[-3000:] for k in killed))
  resumed_from = e2e_testing.latest_checkpoint_step(model_dir)
  assert TRAIN_STEPS > resumed_from >= killed_after >= 8

  # 2. The same commands resume from that checkpoint and finish in lockstep.
  logs = [str(tmp_path / f"resumed_{i}.log") for i in range(2)]
  files = [open(p, "w") for p in logs]
  procs = _start_workers(command, _free_ports(2), files, scratch)
  try:
    for p in procs:
      p.wait(timeout=240)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
    for f in files:
      f.close()
  outputs = [_read(p) for p in logs]
  for proc, out in zip(procs, outputs):
    assert proc.returncode == 0, out[-4000:]
    # (MultiWorkerMirroredStrategy's class name.)
    assert "Strategy CollectiveAllReduceStrategy with 2 replicas" in out, (
        out[-3000:])
    assert "restored from checkpoint" in out and (
        f"ckpt-{resumed_from}" in out), out[-3000:]
    steps = [s for s, _ in e2e_testing.progress(out)]
    # Training continues right after the checkpoint, none repeated.
    assert steps == list(range(resumed_from + 4, TRAIN_STEPS + 1, 4)), (
        steps, out[-3000:])
  # The replicas train one model: the same losses on both workers.
  assert (e2e_testing.progress(outputs[0]) ==
          e2e_testing.progress(outputs[1]))
  assert tf.train.latest_checkpoint(model_dir).endswith(f"ckpt-{TRAIN_STEPS}")
