"""What the synthetic-dataset generators (`tasks/*/synthetic.py`) share.

Each generator writes a small dataset in its task's released format, built
from invented one-word names so that a tokenizer needs only a tiny
vocabulary. The names come from `name_pools` with the generator's own fixed
seed (not the data seed), so the vocabulary is the same for every dataset.
`define_dataset_flags` defines the flags every generator binary has.
"""

import random
from typing import Dict, Iterable, List, Mapping

from absl import flags

# The flags `define_dataset_flags` defines belong to (are key flags of,
# listed by `--help` of) the binary that calls it, not this module.
flags.disclaim_key_flags()

ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v",
          "z")
VOWELS = ("a", "e", "i", "o", "u")


def name_pools(seed: int, sizes: Mapping[str, int],
               used: Iterable[str] = ()) -> Dict[str, List[str]]:
  """Disjoint pools of pronounceable one-word names of 2 or 3 syllables.

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


def define_dataset_flags(num_train: int, num_dev: int) -> None:
  """--output_dir (required), --num_train, --num_dev, --seed. Call only when
  run as a binary: the training binaries define flags of the same names."""
  flags.DEFINE_string("output_dir", None, "Where to write.")
  flags.DEFINE_integer("num_train", num_train, "Training examples.")
  flags.DEFINE_integer("num_dev", num_dev, "Dev examples.")
  flags.DEFINE_integer("seed", 0, "Random seed.")
  flags.mark_flags_as_required(["output_dir"])
