"""A full disk for the TFRecord writes: every `tf.io.TFRecordWriter.write`
raises ENOSPC, as a write to a full file system does."""

import errno
import os

import tensorflow as tf


class FullDiskWriter(tf.io.TFRecordWriter):
  """A `tf.io.TFRecordWriter` whose writes fail with "No space left on
  device"."""

  def write(self, record):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fill_the_disk(monkeypatch) -> None:
  """From now on (for the test), TFRecord writes fail as on a full disk."""
  monkeypatch.setattr(tf.io, "TFRecordWriter", FullDiskWriter)
