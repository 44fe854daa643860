"""`python -m tasks.nq [--gin_file=...] --mode=... --model_dir=...`.

The shared runner with `gin/tasks/nq.gin` applied first and the
official-scorer `--mode=eval` (see `tasks.nq.runner`).
"""

from tasks.nq import runner

if __name__ == "__main__":
  runner.entry()
