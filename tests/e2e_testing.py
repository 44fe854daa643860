"""Helpers for the end-to-end task tests (test_*_e2e.py): the subprocess
environment, running a binary or a served-model script, the lines of the
tiny gin configs, and reading the runner's progress and checkpoints. One
copy, so the tests run binaries alike.
"""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gin

from etc_realformer.training import experiment
from etc_realformer.training import task as task_lib
from tasks import run

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

# (shape of serve_examples' `output` on the first `count` examples of `path`,
# sorted output names of serving_default on zero features).
def stored_and_default(loaded, path, count, output):
  ex = loaded.signatures["serve_examples"](examples=examples_of(path, count))
  feats = zero_features(loaded.signatures["serving_default"])
  return (ex[output].shape.as_list(),
          sorted(loaded.signatures["serving_default"](**feats)))
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


# Ops that call back into Python: a SavedModel holding one needs the code
# that made it.
PYTHON_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")


def python_ops(saved_dir: str) -> List[str]:
  """The `PYTHON_OPS` among a SavedModel's ops (its graph and functions)."""
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
  saved = saved_model_pb2.SavedModel()
  with open(os.path.join(saved_dir, "saved_model.pb"), "rb") as f:
    saved.ParseFromString(f.read())
  found = []
  for meta in saved.meta_graphs:
    graph = meta.graph_def
    nodes = list(graph.node) + [n for fn in graph.library.function
                                for n in fn.node_def]
    found += [n.op for n in nodes if n.op in PYTHON_OPS]
  return found


def serve_here(script: str, saved_dir: str) -> Any:
  """`run_script`'s script run in this process (a process start imports
  TensorFlow again), after checking that the SavedModel at `saved_dir`
  needs no Python: with no op calling back into Python, loading it runs
  no project code. WikiHop's end-to-end test serves from a fresh process
  too."""
  assert not python_ops(saved_dir), python_ops(saved_dir)
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    code = compile(SERVING_HELPERS + script, "<serving script>", "exec")
    exec(code, {"__name__": "__serving__"})  # pylint: disable=exec-used
  return json.loads(out.getvalue().split("RESULT ", 1)[1])


def tiny_encoder_gin_lines(vocab_size: int) -> List[str]:
  """`models/etc_tiny.gin` cut to one 32-wide layer without dropout."""
  return [
      "include 'models/etc_tiny.gin'",
      f"etc_config.vocab_size = {vocab_size}",
      "etc_config.hidden_size = 32",
      "etc_config.intermediate_size = 64",
      "etc_config.num_hidden_layers = 1",
      "etc_config.hidden_dropout_prob = 0.0",
      "etc_config.attention_probs_dropout_prob = 0.0",
  ]


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


def progress(output: str) -> List[Tuple[int, float]]:
  """[(step, loss)] from the runner's progress lines."""
  return [(int(s), float(l)) for s, l in re.findall(
      r"^progress \| step (\d+)/\d+ \| loss ([\d.naninf]+)", output, re.M)]


def latest_checkpoint_step(model_dir: str) -> Optional[int]:
  """Step of the last checkpoint in the `checkpoint` state file (None before
  the first one)."""
  try:
    with open(os.path.join(model_dir, "checkpoint")) as f:
      match = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', f.read(),
                        re.M)
  except OSError:
    return None
  return int(match.group(1)) if match else None


def configured_by_gin(task_gin_file: str) -> Tuple[
    task_lib.Task, experiment.TrainerConfig]:
  """The task and the TrainerConfig that a task's gin file configures (with
  a vocabulary of 100); gin is cleared before and after."""
  gin.clear_config()
  try:
    run.register_tasks()
    run.parse_gin([task_gin_file], ["etc_config.vocab_size = 100"])
    return task_lib.task_class()(), experiment.TrainerConfig()
  finally:
    gin.clear_config()


def train_predict_export(gin_files: Sequence[str], model_dir: str,
                         export_dir: str, capsys) -> Tuple[
                             List[Tuple[int, float]], str]:
  """Trains, predicts and exports in this process (saves process starts);
  returns training's (step, loss) progress and the export path.

  `capsys` is the test's pytest fixture: training's progress is read from
  what it printed.
  """
  run.register_tasks()
  gin.clear_config()
  try:
    run.parse_gin(gin_files, [])
    run.run("train", model_dir)
    steps = progress(capsys.readouterr().out)
    run.run("predict", model_dir)
    export_path = run.run("export", model_dir,
                          export_dir=export_dir)["export_path"]
  finally:
    gin.clear_config()
  return steps, export_path


def run_in_process(gin_files: Sequence[str], mode: str, model_dir: str,
                   capsys) -> str:
  """Runs one mode in this process, as the binary with these gin files would
  (saves a process start); returns what it printed (`capsys`: the test's
  pytest fixture)."""
  run.register_tasks()
  gin.clear_config()
  capsys.readouterr()
  try:
    run.parse_gin(gin_files, [])
    run.run(mode, model_dir)
  finally:
    gin.clear_config()
  return capsys.readouterr().out
