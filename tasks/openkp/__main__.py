"""`python -m tasks.openkp [--gin_file=...] --mode=... --model_dir=...`.

The runner (`tasks.run`) with `gin/tasks/openkp.gin` applied first; further
--gin_file/--gin_bindings override it.
"""

from tasks import run
from tasks.openkp import task  # noqa: F401  pylint: disable=unused-import

if __name__ == "__main__":
  run.entry(default_gin_files=("tasks/openkp.gin",))
