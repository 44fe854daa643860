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
- `featurize_splits` (the task's preprocessing, one printed line a split),
  `configure_gin` (the demo's gin file, then the user's), `trainer_gin`;
- `serve` (one call of an exported signature, in a fresh load);
- `Stopwatch`, `quiet_logging` and `print_lines` / `timing_line` (the
  `demo | ...` lines, each printed once);
- for the generators: `name_pools` (the invented one-word names they draw
  from), `split_rng`, `write_dataset`, `print_paths`.
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
from tasks.common import tokenization

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


def define_dataset_flags(num_train: int, num_dev: int) -> None:
  """--output_dir, --num_train, --num_dev, --seed of a generator binary.

  Call only when run as a binary: the demos define flags of the same names.
  `--output_dir` has no default: the generator checks it with
  `tasks.common.preprocessing.require_flags`.
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


# ------------------------------------------------------------------ serving
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


def print_paths(paths: Mapping[str, str]) -> None:
  """What a generator binary prints: the files it wrote, as JSON."""
  print(json.dumps(dict(paths), indent=2))


def split_rng(seed: int, split: str) -> random.Random:
  """One generator per split, derived from the data seed, so that changing
  the size of one split does not change another."""
  return random.Random(f"{seed}-{split}")

