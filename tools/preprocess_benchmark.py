r"""NQ preprocessing throughput: the single-process path and the Beam
pipeline on the DirectRunner with 1 and N worker processes, the same pages.

  python -m tools.preprocess_benchmark --pages=96 --num_filler=300 \
      --workers=1,2 --output_dir=/tmp/nq_bench

writes `--pages` synthetic NQ pages in the released full format
(`demos.nq.synthetic`: HTML tokens, candidates, bytes; `--num_filler`
filler paragraphs make a page of a few thousand tokens) to one gzipped
jsonl file, then featurizes it with the NQ defaults (long 4096, global 230,
stride 2048):

- `single`: `tasks.nq.preprocess.preprocess`, in this process;
- `beam-inprocess`: `beam_pipeline.run` on the in-process DirectRunner;
- `beam-N`: `--direct_num_workers=N --direct_running_mode=multi_processing`.

Each prints one JSON line: mode, pages, windows, seconds (wall, from the
call to its return: the featurizer and, for Beam, the worker processes'
start included), pages per second, the host's 1-minute load before and
after (`os.getloadavg`), and the projected hours for NQ's 307,373 training
pages on 16 cores at that throughput per core (linear scaling assumed: the
pages are independent). The outputs of every mode are checked to be the
same examples.
"""

import collections
import glob
import json
import os
import shutil
import time
from typing import Any, Dict, List

from absl import app
from absl import flags
import tensorflow as tf

from demos.nq import synthetic
from tasks.common import beam_pipeline
from tasks.nq import preprocess as nq_preprocess

NQ_TRAIN_PAGES = 307_373
CORES = 16

flags.DEFINE_integer("pages", 96, "Synthetic NQ pages.")
flags.DEFINE_integer("num_filler", 300,
                     "Filler paragraphs per page (300: ~4,000 tokens).")
flags.DEFINE_list("workers", ["1", "2"],
                  "DirectRunner worker processes to measure (besides the "
                  "single-process path and the in-process runner).")
flags.DEFINE_string("output_dir", "/tmp/nq_preprocess_benchmark",
                    "Scratch folder (replaced).")
flags.DEFINE_bool("inprocess", True, "Also measure the in-process runner.")


def _write_pages(directory: str, pages: int, num_filler: int) -> str:
  """The dev file of `pages` pages (and vocab.txt beside it)."""
  return synthetic.write_dataset(directory, num_train=0, num_dev=pages,
                                 num_filler=num_filler)["dev"]


def _examples(directory: str) -> collections.Counter:
  return collections.Counter(
      r.numpy() for p in glob.glob(os.path.join(directory, "*.tfrecord"))
      for r in tf.data.TFRecordDataset(p))


def _report(mode: str, pages: int, windows: int, seconds: float,
            load_before: float, workers: int) -> Dict[str, Any]:
  rate = pages / seconds
  cores = max(workers, 1)
  hours = NQ_TRAIN_PAGES / (rate / cores * CORES) / 3600
  return dict(mode=mode, pages=pages, windows=windows,
              seconds=round(seconds, 1), pages_per_s=round(rate, 3),
              load_1min_before=round(load_before, 2),
              load_1min_after=round(os.getloadavg()[0], 2),
              projected_hours_nq_train_16_cores=round(hours, 2))


def main(argv: List[str]) -> None:
  del argv  # Unused.
  f = flags.FLAGS
  shutil.rmtree(f.output_dir, ignore_errors=True)
  path = _write_pages(os.path.join(f.output_dir, "in"), f.pages, f.num_filler)
  vocab = os.path.join(f.output_dir, "in", "vocab.txt")
  args = dict(vocab=vocab, spm_model=None)
  runs = [("single", 0, None)]
  if f.inprocess:
    runs.append(("beam-inprocess", 1, []))
  for n in (int(w) for w in f.workers):
    runs.append((f"beam-{n}", n, [f"--direct_num_workers={n}",
                                  "--direct_running_mode=multi_processing"]))
  reference = None
  for mode, workers, beam_args in runs:
    out = os.path.join(f.output_dir, mode)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    if beam_args is None:
      stats = nq_preprocess.preprocess(
          [path], out, nq_preprocess.make_featurizer(**args))
      windows = stats.windows_written
    else:
      results, _ = beam_pipeline.run(nq_preprocess.NqPipeline(args), [path],
                                     out, beam_args)
      windows = sum(r.sink.stats.windows_written for r in results.values())
    seconds = time.perf_counter() - start
    print(json.dumps(_report(mode, f.pages, windows, seconds, load,
                             workers)), flush=True)
    examples = _examples(out)
    if reference is None:
      reference = examples
    elif examples != reference:
      raise SystemExit(f"{mode}: outputs differ from the single process's")


if __name__ == "__main__":
  app.run(main)
