"""Helpers for the end-to-end task tests (test_*_e2e.py): the subprocess
environment, running a binary or a served-model script, and the trainer
lines of the tiny gin configs. One copy, so the tests run binaries alike.
"""

import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def env() -> Dict[str, str]:
  """The repository importable, TF quiet, CPU only."""
  return dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2",
              CUDA_VISIBLE_DEVICES="")


def run_binary(args: Sequence[str], timeout: int = 240) -> str:
  """`python -m *args` from the repository; its output (asserts rc 0)."""
  proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env(),
                        capture_output=True, text=True, timeout=timeout)
  output = proc.stdout + proc.stderr
  assert proc.returncode == 0, output[-4000:]
  return output


# Defined in every `run_script` script: the served-model checks of the tasks'
# end-to-end tests.
SERVING_HELPERS = """
def examples_of(path, count):
  import tensorflow as tf
  return tf.stack(list(tf.data.TFRecordDataset(path).take(count)))

def zero_features(signature, batch_size=2):
  import tensorflow as tf
  spec = signature.structured_input_signature[1]
  return {k: tf.zeros([batch_size] + s.shape[1:].as_list(), s.dtype)
          for k, s in spec.items()}
"""


def run_script(script: str, cwd: str, timeout: int = 180) -> Any:
  """Runs `python -c script` (in a fresh process, e.g. to load an export
  without the training code) and returns the JSON it prints after
  "RESULT "; the script may call `SERVING_HELPERS`' functions."""
  proc = subprocess.run([sys.executable, "-c", SERVING_HELPERS + script],
                        env=env(),
                        capture_output=True, text=True, timeout=timeout,
                        cwd=cwd)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout.split("RESULT ", 1)[1])


def trainer_gin_lines(train_steps: int, batch_size: int = 8) -> List[str]:
  """TrainerConfig bindings of a tiny run: checkpoint and eval at the end."""
  return [
      f"TrainerConfig.train_batch_size = {batch_size}",
      f"TrainerConfig.eval_batch_size = {batch_size}",
      f"TrainerConfig.train_steps = {train_steps}",
      "TrainerConfig.steps_per_loop = 10",
      f"TrainerConfig.checkpoint_interval = {train_steps}",
      f"TrainerConfig.eval_interval = {train_steps}",
  ]


def write_gin(path: str, lines: Sequence[str]) -> str:
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  return path
