"""One training at a time per model_dir.

Two trainings writing into one model_dir would both append to its history
and interleave their checkpoints under one `checkpoint` state file, each
resuming from the other's steps. `hold(model_dir)` takes an exclusive
`fcntl.flock` on `model_dir/.lock` for the run: a second training fails at
once, naming the folder and the holder's pid. The lock belongs to the open
file, so a run that ends in any way (kill -9 included) releases it through
the OS, and a stale `.lock` file never blocks: only a live holder does.
"""

import contextlib
import errno
import fcntl
import os
from typing import Iterator, Optional, TextIO

from absl import logging
import tensorflow as tf

from etc_realformer.errors import UserInputError

LOCK_FILE = ".lock"


def check_output_dir(path: str, what: str) -> None:
  """Raises UserInputError, "<what>: is a regular file, not a folder" (or
  "is under <file>, a regular file"), when a regular file stands where the
  folder, or a folder above it, would be: checked before anything is built,
  not at the first write. tf.io.gfile paths (gs://...) are left to their
  writes."""
  if "://" in path:
    return
  here = os.path.abspath(path)
  while True:
    if os.path.exists(here):
      if not os.path.isdir(here):
        where = ("is a regular file" if here == os.path.abspath(path) else
                 f"is under {here}, a regular file")
        raise UserInputError(f"{what}: {where}, not a folder")
      return
    parent = os.path.dirname(here)
    if parent == here:
      return
    here = parent


def make_output_dir(path: str, what: str) -> None:
  """`os.makedirs(path, exist_ok=True)`, or UserInputError naming `what`
  and the path when it cannot be a folder (it, or a folder above it, is a
  regular file: `check_output_dir`) or cannot be created (permissions, a
  full disk). A tf.io.gfile path (gs://...) is made by tf.io.gfile."""
  check_output_dir(path, f"{what} {path}")
  if "://" in path:
    try:
      tf.io.gfile.makedirs(path)
    except tf.errors.OpError as e:
      raise UserInputError(f"{what} {path}: cannot create it "
                           f"({e.message})") from e
    return
  try:
    os.makedirs(path, exist_ok=True)
  except FileExistsError as e:  # makedirs' word for a file in the way
    raise UserInputError(f"{what} {path}: a file, not a folder, is in the "
                         f"way ({e.filename})") from e
  except OSError as e:
    raise UserInputError(f"{what} {path}: cannot create it "
                         f"({e.strerror or e})") from e


def acquire(model_dir: str) -> Optional[TextIO]:
  """Locks `model_dir` for this process; returns the open lock file (keep it
  open for the run), or None where no lock can be taken.

  Raises:
    UserInputError: another live process holds the lock.
  """
  if "://" in model_dir:
    # tf.io.gfile filesystems (gs://, s3://, hdfs://) have no flock: no lock
    # is taken there, so two runs into one bucket folder are not stopped.
    logging.warning("%s: not a local path, trainings into it are not locked "
                    "against each other", model_dir)
    return None
  make_output_dir(model_dir, "model_dir")
  path = os.path.join(model_dir, LOCK_FILE)
  lock = open(path, "a+")  # pylint: disable=consider-using-with
  try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as e:
    if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
      # A filesystem without flock (some NFS mounts): ENOLCK, EOPNOTSUPP.
      lock.close()
      logging.warning("%s: no lock on this filesystem (%s); trainings into "
                      "it are not locked against each other", model_dir,
                      e.strerror)
      return None
    lock.seek(0)
    holder = lock.read().strip()
    lock.close()
    raise UserInputError(
        f"model_dir {model_dir}: another training is writing there"
        f"{f' (pid {holder})' if holder else ''}; wait for it to end or "
        "choose another model_dir") from None
  lock.seek(0)
  lock.truncate()
  lock.write(f"{os.getpid()}\n")
  lock.flush()
  return lock


def release(lock: Optional[TextIO]) -> None:
  """Unlocks. The file stays: removing it would let a third run lock a new
  file while a second still holds the old one."""
  if lock is not None:
    fcntl.flock(lock, fcntl.LOCK_UN)
    lock.close()


@contextlib.contextmanager
def hold(model_dir: str) -> Iterator[None]:
  """`acquire` for the `with` block, then `release`."""
  lock = acquire(model_dir)
  try:
    yield
  finally:
    release(lock)
