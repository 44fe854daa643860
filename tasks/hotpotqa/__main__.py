"""`python -m tasks.hotpotqa [--gin_file=...] --mode=... --model_dir=...`.

The shared runner with `gin/tasks/hotpotqa.gin` applied first and the
official-metric `--mode=eval` (see `tasks.hotpotqa.runner`).
"""

from tasks.hotpotqa import runner

if __name__ == "__main__":
  runner.entry()
