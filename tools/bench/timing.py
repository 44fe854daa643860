"""Timing and record output shared by the benchmark tools.

Plain Python on purpose: the GPU tools (`xla_runner`, `gpu_peers`) run on
machines with jax or PyTorch and no TensorFlow, and import this module too.
"""

import json
import statistics
import time
from typing import Any, Callable, Dict, List, Optional


def time_calls(step: Callable[[], Any], warmup: int,
               repeats: int) -> Dict[str, Any]:
  """Calls `step` (which must block until done) `warmup` + `repeats` times.

  The first call is one of the warm-up calls and is timed on its own
  (`first_call_s`: compilation or graph tracing shows there).
  """
  t0 = time.perf_counter()
  step()
  first = time.perf_counter() - t0
  for _ in range(max(0, warmup - 1)):
    step()
  times: List[float] = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
  return {"first_call_s": first, "times_s": times,
          "median_s": statistics.median(times), "min_s": min(times),
          "mean_s": statistics.fmean(times)}


def emit(record: Dict[str, Any], output_jsonl: Optional[str]) -> None:
  """Prints the record as one JSON line, and appends it to `output_jsonl`."""
  line = json.dumps(record, sort_keys=True)
  print(line, flush=True)
  if output_jsonl:
    with open(output_jsonl, "a") as f:
      f.write(line + "\n")
