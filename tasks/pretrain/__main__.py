"""`python -m tasks.pretrain [--gin_file=...] --mode=... --model_dir=...`.

The one runner (`tasks.run`) with `gin/tasks/pretrain.gin` applied first;
further --gin_file/--gin_bindings override it.
"""

from tasks import run

if __name__ == "__main__":
  run.entry("tasks/pretrain.gin")
