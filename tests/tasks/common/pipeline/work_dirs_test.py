"""Tests for tasks.common.pipeline.work_dirs: a killed run's work folder
removed by the next run, a live one's kept."""

import os
import socket

from tasks.common.pipeline import work_dirs


def test_killed_runs_work_folders_are_removed_live_ones_kept(tmp_path):
  out = str(tmp_path / "out")
  host = socket.gethostname()
  dead = tmp_path / f"out.tmp-{host}-{2**22 + 1}-0123abcd"  # > pid_max.
  live = tmp_path / f"out.tmp-{host}-{os.getpid()}-0123abcd"
  elsewhere = tmp_path / f"out.tmp-another-host-{2**22 + 1}-0123abcd"
  other_output = tmp_path / f"out2.tmp-{host}-{2**22 + 1}-0123abcd"
  for folder in (dead, live, elsewhere, other_output):
    (folder / "_parts").mkdir(parents=True)
  assert work_dirs.remove_stale_work_dirs(out) == [str(dead)]
  assert sorted(os.listdir(tmp_path)) == sorted(
      p.name for p in (live, elsewhere, other_output))
  name = os.path.basename(work_dirs.work_dir_of(out))
  assert name.startswith(f"out.tmp-{host}-{os.getpid()}-")
