"""The NQ preprocessing benchmark: its rates and projection, and a tiny run
of the single-process path beside the in-process Beam runner."""

import json

import pytest

from tools.bench import preprocess_benchmark as bench


def test_report_steady_rate_cancels_start_up_costs():
  # 10 s of start-up in both runs; 1 page per second after it.
  report = bench._report("beam-2", (4, 20), (14.0, 30.0), windows=40,  # pylint: disable=protected-access
                         load_before=0.5, workers=2)
  assert report["pages_per_s_steady"] == pytest.approx(1.0)
  assert report["pages_per_s_wall"] == pytest.approx(20 / 30, abs=1e-3)
  # 2 workers at 1 page/s: 0.5 page/s per core, on 16 cores.
  hours = bench.NQ_TRAIN_PAGES / (0.5 * bench.CORES) / 3600
  assert report["projected_hours_nq_train_16_cores"] == pytest.approx(
      hours, abs=0.01)
  assert report["mode"] == "beam-2" and report["windows"] == 40


def _fake_modes(monkeypatch, differing_mode=None):
  """`_run` writes one record per page (the mode named `differing_mode`
  another one), without featurizing."""
  import os  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  calls = []

  def run(mode, paths, out, args, beam_args):
    calls.append((mode, [os.path.basename(p) for p in paths], beam_args))
    os.makedirs(out)
    pages = sum(int(open(p).read()) for p in paths)
    with tf.io.TFRecordWriter(os.path.join(out, "dev.tfrecord")) as w:
      for page in range(pages):
        w.write(f"{page}{'x' if mode == differing_mode else ''}".encode())
    if mode == "single":  # 1 page per second, after 1, 2 or 3 s.
      return 1.0 + (len(calls) // 2 % 3) + pages, 2 * pages
    return 1.0 + pages, 2 * pages

  def write_pages(directory, pages, num_filler, files):
    del num_filler  # unused
    os.makedirs(directory)
    paths = [os.path.join(directory, f"dev-{i}.jsonl.gz")
             for i in range(files)]
    for i, path in enumerate(paths):
      with open(path, "w") as f:
        f.write(str(pages * (i + 1) // files - pages * i // files))
    return paths

  monkeypatch.setattr(bench, "_run", run)
  monkeypatch.setattr(bench, "_write_pages", write_pages)
  return calls


def _main(tmp_path, **overrides):
  bench.benchmark(str(tmp_path / "bench"), pages=3, small_pages=1,
                  **overrides)


def test_every_mode_runs_both_sizes_after_a_warm_up(tmp_path, monkeypatch,
                                                    capsys):
  calls = _fake_modes(monkeypatch)
  _main(tmp_path, workers=[1, 2], inprocess=True)
  lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert [r["mode"] for r in lines] == ["single", "beam-inprocess",
                                        "beam-1", "beam-2"]
  assert calls[0][0] == "warmup"
  assert [c[2] for c in calls[1:] if c[0] == "beam-2"] == [
      ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
  ] * 2
  assert all(r["pages"] == [1, 3] and r["windows"] == 6 for r in lines)
  assert lines[0]["pages_per_s_steady"] == pytest.approx(1.0)


def test_pages_split_over_files(tmp_path, monkeypatch, capsys):
  calls = _fake_modes(monkeypatch)
  _main(tmp_path, workers=[2], inprocess=False, files=2)
  lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert all(len(c[1]) == 2 for c in calls)
  assert all(r["files"] == 2 and r["windows"] == 6 for r in lines)


def test_repeats_take_turns_and_report_medians(tmp_path, monkeypatch,
                                               capsys):
  calls = _fake_modes(monkeypatch)
  _main(tmp_path, workers=[2], inprocess=False, repeats=3)
  assert [c[0] for c in calls[1::2]] == ["single", "beam-2"] * 3
  single, beam = [json.loads(line)
                  for line in capsys.readouterr().out.splitlines()]
  assert len(single["seconds_each"]) == 3
  assert single["seconds"] == [3.0, 5.0]  # the medians of 2-4 and 4-6 s
  assert beam["pages_per_s_steady"] == pytest.approx(1.0)


def test_write_pages_keeps_every_page_in_order(tmp_path):
  import gzip  # pylint: disable=g-import-not-at-top
  write_pages = bench._write_pages  # pylint: disable=protected-access
  whole = write_pages(str(tmp_path / "one"), 5, num_filler=1)
  split = write_pages(str(tmp_path / "three"), 5, num_filler=1, files=3)
  assert len(whole) == 1 and len(split) == 3
  read = lambda paths: [line for p in paths for line in gzip.open(p)]
  assert [len(read([p])) for p in split] == [1, 2, 2]
  assert read(split) == read(whole)


def test_a_mode_whose_examples_differ_fails_the_run(tmp_path, monkeypatch):
  _fake_modes(monkeypatch, differing_mode="beam-1")
  with pytest.raises(SystemExit, match="beam-1: outputs differ"):
    _main(tmp_path, workers=[1], inprocess=False)
