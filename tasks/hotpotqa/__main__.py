"""`python -m tasks.hotpotqa [--gin_file=...] --mode=... --model_dir=...`.

The one runner (`tasks.run`) with `gin/tasks/hotpotqa.gin` applied first;
further --gin_file/--gin_bindings override it. `--mode=eval` adds the
official metric with the supporting-fact threshold search
(`HotpotQATask.official_scores`).
"""

from tasks import run

if __name__ == "__main__":
  run.entry("tasks/hotpotqa.gin")
