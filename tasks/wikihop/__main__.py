"""`python -m tasks.wikihop [--gin_file=...] --mode=... --model_dir=...`.

The runner (`tasks.run`) with `gin/tasks/wikihop.gin` applied first; further
--gin_file/--gin_bindings override it.
"""

from tasks import run

if __name__ == "__main__":
  run.entry(default_gin_files=("tasks/wikihop.gin",))
