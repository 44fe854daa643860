"""The work folders of a Beam preprocess run, beside its output folder.

`<output_dir>.tmp-<host>-<pid>-<random>`: `work_dir_of` names a new one;
`remove_stale_work_dirs` removes those a killed run (kill -9, a lost
machine) left, once their process is gone (a live run's is left alone).
"""

import os
import re
import socket
from typing import List
import uuid

from absl import logging
import tensorflow as tf


# The work folder of a run: `<output_dir>.tmp-<host>-<pid>-<random>`.
_WORK_DIR = re.compile(r"\.tmp-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8}$")


def work_dir_of(output_dir: str) -> str:
  """A new work folder beside `output_dir`, named by this host and
  process (`remove_stale_work_dirs` tells a dead run's by them)."""
  return (f"{output_dir}.tmp-{socket.gethostname()}-{os.getpid()}-"
          f"{uuid.uuid4().hex[:8]}")


def _process_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # Another user's process.
  return True


def remove_stale_work_dirs(output_dir: str) -> List[str]:
  """Removes the work folders of earlier runs over `output_dir` that were
  killed (kill -9, a lost machine) before they could remove their own: those
  of this host whose process is gone. A live run's folder, or another
  host's, is left alone. Returns the removed folders."""
  parent, base = os.path.split(output_dir)
  parent = parent or "."
  if not tf.io.gfile.isdir(parent):
    return []
  removed = []
  host = socket.gethostname()
  for name in tf.io.gfile.listdir(parent):
    name = name.rstrip("/")
    match = _WORK_DIR.match(name[len(base):]) if name.startswith(
        base) else None
    if (match is None or match.group("host") != host or
        _process_alive(int(match.group("pid")))):
      continue
    path = os.path.join(parent, name)
    tf.io.gfile.rmtree(path)
    removed.append(path)
  if removed:
    logging.info("removed the work folders of killed runs: %s", removed)
  return removed
