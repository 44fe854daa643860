"""What the demos and their synthetic-data generators share.

Each demo writes synthetic files in its task's released format, featurizes
them, trains a tiny model with the one runner from a gin config it writes
next to its outputs, exports and answers one record through the SavedModel.
What differs per task (the data, the gin text, the metric and the served
call's inputs) stays in the demo; here, once:

- flags: `define_flags` (the demo binaries), `define_dataset_flags` (the
  generator binaries);
- the output layout `DemoDirs` (OUTPUT_DIR/{data,model,export}, demo.gin)
  and `write_results` (OUTPUT_DIR/demo_results.json);
- `demo_main` / `dataset_main`: the binaries' `main`;
- `featurize_splits` (the task's preprocessing, one printed line a split),
  `configure_gin` (the demo's gin file, then the user's), `model_gin` and
  `trainer_gin` (the tiny model and its training);
- `train_and_export` (the runner's modes, then the export) and `serve` (one
  call of an exported signature, in a fresh load);
- `Stopwatch`, `quiet_logging` and `print_lines` / `timing_line` (the
  `demo | ...` lines, each printed once);
- for the generators: `name_pools` (the invented one-word names they draw
  from), `split_rng`, `write_dataset`.
"""

import dataclasses
import json
import os
import random
import sys
import time
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional,
                    Sequence, Tuple)

from absl import flags
from absl import logging
import gin
import numpy as np
import tensorflow as tf
import tensorflow_text  # pylint: disable=unused-import  # serve_raw's ops

from tasks import run
from tasks.common.command_line import preprocess_flags
from tasks.common.featurization import tokenization

# The flags `define_flags` / `define_dataset_flags` define belong to (are
# key flags of, listed by `--help` of) the binary that calls them.
flags.disclaim_key_flags()

RESULTS_FILE = "demo_results.json"


# --------------------------------------------------------------------- flags
@dataclasses.dataclass(frozen=True)
class DemoFlags:
  """The flag holders every demo defines."""
  output_dir: flags.FlagHolder
  num_train: flags.FlagHolder
  num_dev: flags.FlagHolder
  seed: flags.FlagHolder
  train_steps: flags.FlagHolder


def define_flags(output_dir: str, train_steps: int,
                 num_train: int = 2000) -> DemoFlags:
  """--output_dir, --num_train, --num_dev, --seed, --train_steps (the
  runner's --gin_file / --gin_bindings come with `tasks.run`)."""
  return DemoFlags(
      output_dir=flags.DEFINE_string("output_dir", output_dir,
                                     "Where data, model and export go."),
      num_train=flags.DEFINE_integer("num_train", num_train,
                                     "Synthetic train size."),
      num_dev=flags.DEFINE_integer("num_dev", 300, "Synthetic dev size."),
      seed=flags.DEFINE_integer("seed", 0, "Data and shuffle seed."),
      train_steps=flags.DEFINE_integer("train_steps", train_steps,
                                       "Optimizer steps."))


def demo_main(run_demo: Callable[..., Dict[str, Any]],
              summary_lines: Callable[[Dict[str, Any]], List[str]],
              *extra_flags: str) -> Callable[[List[str]], None]:
  """A demo binary's `main`: `run_demo` with the flags of `define_flags`
  (and the runner's --gin_file / --gin_bindings, then `extra_flags` by
  name), then its `summary_lines` printed (`print_lines`)."""
  def main(argv: List[str]) -> None:
    preprocess_flags.check_command_line(argv, ())
    quiet_logging()
    f = flags.FLAGS
    summary = run_demo(f.output_dir, num_train=f.num_train,
                       num_dev=f.num_dev, seed=f.seed,
                       train_steps=f.train_steps, gin_files=f.gin_file,
                       gin_bindings=f.gin_bindings,
                       **{name: f[name].value for name in extra_flags})
    print_lines(summary_lines(summary))
  return main


def define_dataset_flags(num_train: int, num_dev: int) -> None:
  """--output_dir, --num_train, --num_dev, --seed of a generator binary.

  Call only when run as a binary: the demos define flags of the same names.
  `--output_dir` has no default: `dataset_main` requires it.
  """
  flags.DEFINE_string("output_dir", None, "Where to write.")
  flags.DEFINE_integer("num_train", num_train, "Training examples.")
  flags.DEFINE_integer("num_dev", num_dev, "Dev examples.")
  flags.DEFINE_integer("seed", 0, "Random seed.")


# --------------------------------------------------------------- the layout
@dataclasses.dataclass(frozen=True)
class DemoDirs:
  """OUTPUT_DIR/{data,model,export} and the gin file the demo writes."""
  output: str
  data: str
  model: str
  export: str
  gin: str

  @classmethod
  def under(cls, output_dir: str) -> "DemoDirs":
    root = os.path.abspath(output_dir)
    return cls(output=root, data=os.path.join(root, "data"),
               model=os.path.join(root, "model"),
               export=os.path.join(root, "export"),
               gin=os.path.join(root, "demo.gin"))


def write_results(dirs: DemoDirs, summary: Mapping[str, Any]) -> str:
  """Writes the demo's summary to OUTPUT_DIR/demo_results.json."""
  path = os.path.join(dirs.output, RESULTS_FILE)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(summary, f, indent=2, ensure_ascii=False)
  return path


# ------------------------------------------------------------ data and gin
def featurize_splits(split_files: Mapping[str, str], data_dir: str,
                     featurizer, preprocess_file: Callable) -> None:
  """Caches each split's TFRecords and prints one line of stats per split.

  Args:
    split_files: split name -> released-format file.
    data_dir: where the TFRecords and stats go.
    featurizer: the task's featurizer.
    preprocess_file: the task's `preprocess.preprocess_file(path, output_dir,
      featurizer)` returning `RecordStats`.
  """
  for split, path in split_files.items():
    stats = preprocess_file(path, data_dir, featurizer)
    print(f"demo | {split}: {stats.examples_written} examples "
          f"({stats.examples_truncated} truncated, {stats.num_skipped} "
          "skipped)", flush=True)


def configure_gin(dirs: DemoDirs, gin_text: str,
                  gin_files: Optional[List[str]] = None,
                  gin_bindings: Optional[List[str]] = None) -> None:
  """Writes the demo's gin config, then parses it (user files/bindings win).

  The tasks' configurables are registered first (`tasks.run.register_tasks`:
  the `tasks/*` packages); a demo's own configurables (e.g. a demo task)
  exist once the demo has imported their module.
  """
  with open(dirs.gin, "w") as f:
    f.write(gin_text)
  run.register_tasks()
  gin.clear_config()
  run.parse_gin([dirs.gin, *(gin_files or [])], gin_bindings or [])


def model_gin(task_gin: str, vocab_size: int, num_hidden_layers: int) -> str:
  """The demos' model (a tiny ETC-RealFormer on the CPU strategy: hidden 64,
  4 heads, intermediate 128, local radius 8, no dropout) after the task's
  gin file: gin text."""
  return f"""\
include '{task_gin}'
include 'models/etc_tiny.gin'
include 'strategies/cpu.gin'

etc_config.vocab_size = {vocab_size}
etc_config.hidden_size = 64
etc_config.num_hidden_layers = {num_hidden_layers}
etc_config.num_attention_heads = 4
etc_config.intermediate_size = 128
etc_config.local_radius = 8
etc_config.hidden_dropout_prob = 0.0
etc_config.attention_probs_dropout_prob = 0.0
"""


def task_gin(task: str, long_seq_len: int, global_seq_len: int,
             data_dir: str, train: str, dev: str, seed: int) -> str:
  """A demo task's lengths, TFRecords (`train`, and `dev` for evaluation and
  predictions, under `data_dir`), vocabulary (`data_dir`/vocab.txt) and
  seed: gin text."""
  return f"""\
{task}.long_seq_len = {long_seq_len}
{task}.global_seq_len = {global_seq_len}
{task}.train_input = '{data_dir}/{train}'
{task}.eval_input = '{data_dir}/{dev}'
{task}.predict_input = '{data_dir}/{dev}'
{task}.vocab_file = '{data_dir}/vocab.txt'
{task}.seed = {seed}
"""


def trainer_gin(train_steps: int) -> str:
  """The demos' optimizer and trainer settings (tiny model, CPU): gin text."""
  return f"""\
optimizer.learning_rate = 2e-3
optimizer.warmup_fraction = 0.05
optimizer.weight_decay_rate = 0.01
TrainerConfig.train_batch_size = 16
TrainerConfig.eval_batch_size = 64
TrainerConfig.train_steps = {train_steps}
TrainerConfig.steps_per_loop = 100
TrainerConfig.checkpoint_interval = 500
TrainerConfig.eval_interval = {train_steps}
"""


def vocab_size(vocab_path: str) -> int:
  """Entries of a vocab.txt (one a line): the demo model's vocab_size."""
  with open(vocab_path, encoding="utf-8") as f:
    return sum(1 for _ in f)


# ------------------------------------------------------- training, serving
def train_and_export(dirs: DemoDirs, clock: "Stopwatch",
                     modes: Sequence[str] = ("train_and_eval",)
                     ) -> Tuple[Dict[str, Any], str]:
  """Runs the runner's `modes` in order on OUTPUT_DIR/model (gin configured),
  laps `clock` as "train_and_eval", then exports to OUTPUT_DIR/export.

  Returns:
    (the last mode's results, the SavedModel's path).
  """
  results: Dict[str, Any] = {}
  for mode in modes:
    results = run.run(mode, dirs.model)
  clock.lap("train_and_eval")
  return results, run.run("export", dirs.model,
                          export_dir=dirs.export)["export_path"]


def serve(export_path: str, signature: str = "serve_raw",
          **inputs: Any) -> Dict[str, np.ndarray]:
  """Loads a SavedModel and calls one of its signatures on `inputs`.

  Returns:
    The outputs as NumPy values (strings as bytes).
  """
  loaded = tf.saved_model.load(export_path)
  outputs = loaded.signatures[signature](
      **{k: tf.constant(v) for k, v in inputs.items()})
  return {k: v.numpy() for k, v in outputs.items()}


# ------------------------------------------------------------------ output
class Stopwatch:
  """Wall time of the demo's phases, for its summary."""

  def __init__(self):
    self._start = time.time()
    self._last = self._start
    self.seconds: Dict[str, float] = {}

  def lap(self, name: str) -> None:
    now = time.time()
    self.seconds[name] = round(now - self._last, 1)
    self._last = now

  def summary(self) -> Dict[str, float]:
    return {**self.seconds, "total": round(time.time() - self._start, 1)}


def timing_line(seconds: Mapping[str, float]) -> str:
  """"wall time: T s (data D s, train+eval E s)" of a `Stopwatch.summary`
  with the laps "data" and "train_and_eval"."""
  return (f"wall time: {seconds['total']:.0f} s (data "
          f"{seconds['data']:.0f} s, train+eval "
          f"{seconds['train_and_eval']:.0f} s)")


def quiet_logging() -> None:
  """Hides absl's INFO log unless `--verbosity` is given.

  A demo's output is its printed lines (its own, the trainer's `progress |`
  and the loop's `train |` / `eval |` ones); the loop also logs each line it
  prints, which would show every line twice. Call at the start of `main`.
  """
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)


def print_lines(lines: Iterable[str]) -> None:
  """The demo's closing lines, each once, as `demo | <line>` on stdout."""
  text = "\n".join(f"demo | {line}" for line in lines)
  print(f"\n{text}", file=sys.stdout, flush=True)


# ------------------------------------------------------- synthetic datasets
ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v",
          "z")
VOWELS = ("a", "e", "i", "o", "u")


def name_pools(seed: int, sizes: Mapping[str, int],
               used: Iterable[str] = ()) -> Dict[str, List[str]]:
  """Disjoint pools of pronounceable one-word names of 2 or 3 syllables.

  The generators draw from them with their own fixed seed (not the data
  seed), so a generator's vocabulary is the same for every dataset.

  Args:
    seed: the pools' own seed.
    sizes: names per pool, in the order the pools are drawn.
    used: words no name may equal (the generator's fixed words).

  Returns:
    {pool: [names]}, no name in two pools nor in `used`.
  """
  rng = random.Random(seed)
  used = set(used)
  pools = {}
  for kind, size in sizes.items():
    names = []
    while len(names) < size:
      name = "".join(rng.choice(ONSETS) + rng.choice(VOWELS)
                     for _ in range(rng.choice((2, 3))))
      if name not in used:
        used.add(name)
        names.append(name)
    pools[kind] = names
  return pools


def write_dataset(output_dir: str,
                  splits: Mapping[str, Tuple[str, Sequence[Any]]],
                  vocabulary: Sequence[str]) -> Dict[str, str]:
  """Writes a synthetic dataset: each split's records as one JSON array (the
  released formats) and a `vocab.txt`.

  Args:
    output_dir: created if missing.
    splits: split -> (file name, records).
    vocabulary: the tokens of `vocab.txt`, in id order.

  Returns:
    {split: path, ..., "vocab": path}.
  """
  os.makedirs(output_dir, exist_ok=True)
  paths = {}
  for split, (name, split_records) in splits.items():
    paths[split] = os.path.join(output_dir, name)
    with open(paths[split], "w", encoding="utf-8") as f:
      json.dump(list(split_records), f)
  paths["vocab"] = os.path.join(output_dir, "vocab.txt")
  tokenization.write_vocab(paths["vocab"], vocabulary)
  return paths


def dataset_main(write: Callable[..., Mapping[str, str]],
                 *extra_flags: str) -> Callable[[List[str]], None]:
  """A generator binary's `main`: `write(output_dir, num_train, num_dev,
  seed, *extra_flags' values)` with the flags of `define_dataset_flags`,
  then the paths it returns printed as JSON."""
  def main(argv: List[str]) -> None:
    preprocess_flags.check_command_line(argv, ("output_dir",))
    f = flags.FLAGS
    paths = write(f.output_dir, f.num_train, f.num_dev, f.seed,
                  *(f[name].value for name in extra_flags))
    print(json.dumps(dict(paths), indent=2))
  return main


def split_rng(seed: int, split: str) -> random.Random:
  """One generator per split, derived from the data seed, so that changing
  the size of one split does not change another."""
  return random.Random(f"{seed}-{split}")

