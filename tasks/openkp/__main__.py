"""`python -m tasks.openkp [--gin_file=...] --mode=... --model_dir=...`: the
one runner (`tasks.run`) with `gin/tasks/openkp.gin` applied first."""

from tasks import run

if __name__ == "__main__":
  run.entry("tasks/openkp.gin")
