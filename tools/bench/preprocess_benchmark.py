r"""NQ preprocessing throughput: the single-process path and the Beam
pipeline on the DirectRunner with 1 and N worker processes, the same pages.

  python -m tools.bench.preprocess_benchmark --pages=128 --small_pages=16 \
      --num_filler=450 --workers=1,2 --files=1 --output_dir=/tmp/nq_bench

writes `--pages` synthetic NQ pages in the released full format
(`demos.nq.synthetic`: HTML tokens, candidates, bytes; `--num_filler`
filler paragraphs make a page of a few thousand tokens) to `--files`
gzipped jsonl files (NQ's training set is 50 such files; a file is read by
one worker), then featurizes them with the NQ defaults (long 4096, global
230, stride 2048):

- `single`: `tasks.nq.preprocess.preprocess`, in this process;
- `beam-inprocess`: `beam_pipeline.run` on the in-process DirectRunner;
- `beam-N`: `--direct_num_workers=N --direct_running_mode=multi_processing`.

each over `--small_pages` and over `--pages` pages, after one
unmeasured warm-up run; with `--repeats=N` the modes take turns N times
and the seconds reported are the medians (this host's spread between runs
is larger than the differences measured). Each mode prints one JSON line:
pages, windows,
seconds of both runs (wall, from the call to its return: the featurizer
and, for Beam, the worker processes' start included), the wall rate of the
large run, the steady rate ((pages - small_pages) / (seconds difference):
fixed start-up costs cancel), the CPU seconds of both runs (this process
and its worker processes) and the steady cores (the CPU seconds of the
extra pages over their wall seconds), the host's 1-minute load before the
mode's first run and at the end (`os.getloadavg`), and the projected hours
for NQ's 307,373 training pages on 16 cores at the steady rate per worker
(linear scaling assumed: the pages are independent). The outputs of every mode are checked to be the
same examples.
"""

import collections
import glob
import gzip
import json
import os
import resource
import shutil
import statistics
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import app
from absl import flags
import tensorflow as tf

from demos.nq import synthetic
from tasks.common.pipeline import beam_pipeline
from tasks.nq import preprocess as nq_preprocess

NQ_TRAIN_PAGES = 307_373
CORES = 16


def define_flags() -> None:
  """The binary's flags (defined by `__main__` only: other tools define
  --output_dir too)."""
  flags.DEFINE_integer("pages", 128, "Synthetic NQ pages (the large run).")
  flags.DEFINE_integer("num_filler", 450,
                       "Filler paragraphs per page (450: ~6,000 tokens).")
  flags.DEFINE_list("workers", ["1", "2"],
                    "DirectRunner worker processes to measure (besides the "
                    "single-process path and the in-process runner).")
  flags.DEFINE_string("output_dir", "/tmp/nq_preprocess_benchmark",
                      "Scratch folder (replaced).")
  flags.DEFINE_bool("inprocess", True, "Also measure the in-process runner.")
  flags.DEFINE_integer("small_pages", 16,
                       "Pages of the small run (start-up costs: the steady "
                       "rate is the difference to --pages).")
  flags.DEFINE_integer("repeats", 1,
                       "Runs of every mode (taking turns); medians reported.")
  flags.DEFINE_integer("files", 1,
                       "Input files the pages of each run are split over "
                       "(consecutive pages per file).")


def _write_pages(directory: str, pages: int, num_filler: int,
                 files: int = 1) -> List[str]:
  """`pages` pages in `files` gzipped jsonl files (vocab.txt beside them)."""
  dev = synthetic.write_dataset(directory, num_train=0, num_dev=pages,
                                num_filler=num_filler)["dev"]
  if files == 1:
    return [dev]
  with gzip.open(dev, "rb") as f:
    lines = f.readlines()
  os.remove(dev)
  stem = os.path.basename(dev).split(".")[0]
  paths = []
  for i in range(files):
    paths.append(os.path.join(directory, f"{stem}-{i:02d}.jsonl.gz"))
    with gzip.open(paths[-1], "wb") as f:
      f.writelines(lines[len(lines) * i // files:
                         len(lines) * (i + 1) // files])
  return paths


def _examples(directory: str) -> collections.Counter:
  return collections.Counter(
      r.numpy() for p in glob.glob(os.path.join(directory, "*.tfrecord"))
      for r in tf.data.TFRecordDataset(p))


def _run(mode: str, paths: List[str], out: str, args: Dict[str, Any],
         beam_args: Optional[List[str]]) -> Tuple[float, int]:
  """(wall seconds, windows written) of one mode over the files."""
  start = time.perf_counter()
  if beam_args is None:
    stats = nq_preprocess.preprocess(
        paths, out, nq_preprocess.make_featurizer(**args))
    windows = stats.windows_written
  else:
    results, _ = beam_pipeline.run(nq_preprocess.NqPipeline(args), paths,
                                   out, beam_args)
    windows = sum(r.sink.stats.windows_written for r in results.values())
  del mode  # Unused.
  return time.perf_counter() - start, windows


def _cpu_seconds() -> float:
  """User + system CPU seconds of this process and its finished children
  (the DirectRunner's worker processes, once a run has stopped them)."""
  return sum(r.ru_utime + r.ru_stime for r in (
      resource.getrusage(resource.RUSAGE_SELF),
      resource.getrusage(resource.RUSAGE_CHILDREN)))


def _report(mode: str, pages: Tuple[int, int], seconds: Tuple[float, float],
            windows: int, load_before: float, workers: int,
            files: int = 1,
            cpu: Tuple[float, float] = (0.0, 0.0)) -> Dict[str, Any]:
  """The JSON line of a mode: wall rates, and the steady rate (the large
  run's extra pages over its extra seconds: start-up costs cancel); the
  steady cores, the CPU seconds of those extra pages over their wall
  seconds, say how many cores the mode kept busy."""
  steady = (pages[1] - pages[0]) / max(seconds[1] - seconds[0], 1e-9)
  cores = (cpu[1] - cpu[0]) / max(seconds[1] - seconds[0], 1e-9)
  hours = NQ_TRAIN_PAGES / (steady / max(workers, 1) * CORES) / 3600
  return dict(mode=mode, pages=list(pages), files=files, windows=windows,
              seconds=[round(t, 1) for t in seconds],
              pages_per_s_wall=round(pages[1] / seconds[1], 3),
              pages_per_s_steady=round(steady, 3),
              cpu_s=[round(c, 1) for c in cpu],
              cores_steady=round(cores, 2),
              load_1min_before=round(load_before, 2),
              load_1min_after=round(os.getloadavg()[0], 2),
              projected_hours_nq_train_16_cores=round(hours, 2))


def benchmark(output_dir: str, pages: int = 128, small_pages: int = 16,
              num_filler: int = 450, workers: Sequence[int] = (1, 2),
              inprocess: bool = True, files: int = 1,
              repeats: int = 1) -> None:
  """Prints a JSON line per mode (module docstring); `output_dir` is
  replaced. With `repeats` > 1 every mode runs that many times, the modes
  taking turns (a slow minute of the host then falls on all of them), and
  each line reports the median seconds and CPU seconds of its runs."""
  shutil.rmtree(output_dir, ignore_errors=True)
  sizes = (small_pages, pages)
  paths = [_write_pages(os.path.join(output_dir, f"in{n}"), n, num_filler,
                        files) for n in sizes]
  args = dict(vocab=os.path.join(os.path.dirname(paths[0][0]), "vocab.txt"),
              spm_model=None)
  runs = [("single", 0, None)]
  if inprocess:
    runs.append(("beam-inprocess", 1, []))
  for n in workers:
    runs.append((f"beam-{n}", n, [f"--direct_num_workers={n}",
                                  "--direct_running_mode=multi_processing"]))
  # This process's TF warm-up, outside every measured run.
  _run("warmup", paths[0], os.path.join(output_dir, "warmup"), args, None)
  # mode -> [(seconds, windows, cpu seconds) of the small and large runs].
  measured = collections.defaultdict(list)
  loads = {}
  reference = None
  for _ in range(repeats):
    for mode, _, beam_args in runs:
      loads.setdefault(mode, os.getloadavg()[0])
      for p, n in zip(paths, sizes):
        out = os.path.join(output_dir, f"{mode}-{n}")
        shutil.rmtree(out, ignore_errors=True)
        before = _cpu_seconds()
        seconds, windows = _run(mode, p, out, args, beam_args)
        measured[mode].append((seconds, windows, _cpu_seconds() - before))
      examples = _examples(os.path.join(output_dir, f"{mode}-{pages}"))
      if reference is None:
        reference = examples
      elif examples != reference:
        raise SystemExit(f"{mode}: outputs differ from the single process's")
  for mode, num_workers, _ in runs:
    small, large = measured[mode][0::2], measured[mode][1::2]
    median = lambda timed, i: statistics.median(t[i] for t in timed)
    report = _report(mode, sizes, (median(small, 0), median(large, 0)),
                     large[0][1], loads[mode], num_workers, files,
                     (median(small, 2), median(large, 2)))
    if repeats > 1:
      report["seconds_each"] = [[round(s[0], 1), round(l[0], 1)]
                                for s, l in zip(small, large)]
    print(json.dumps(report), flush=True)


def main(argv: List[str]) -> None:
  del argv  # Unused.
  f = flags.FLAGS
  benchmark(f.output_dir, f.pages, f.small_pages, f.num_filler,
            [int(w) for w in f.workers], f.inprocess, f.files, f.repeats)


if __name__ == "__main__":
  define_flags()
  app.run(main)
