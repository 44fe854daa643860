"""A user's mistake is one line on stderr and exit code 2; a bug keeps its
traceback."""

import errno
import os

import gin
import pytest
import tensorflow as tf

from etc_realformer import cli
from etc_realformer.errors import UserInputError


def _exit_and_message(capsys, error):
  """(exit code, stderr stripped) of a guarded main that raises `error`."""
  def main(argv):
    raise error

  with pytest.raises(SystemExit) as exited:
    cli.guarded(main)(["prog"])
  return exited.value.code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("error,line", [
    (UserInputError("data.json: record 'x', field 'query': missing"),
     "error: data.json: record 'x', field 'query': missing"),
    (FileNotFoundError("vocab.txt: vocabulary file not found"),
     "error: vocab.txt: vocabulary file not found"),
    # As gin re-raises an error from inside a configurable.
    (UserInputError("ckpt-2: the checkpoint does not fit\n"
                    "  In call to configurable 'run_experiment' (<function>)"),
     "error: ckpt-2: the checkpoint does not fit"),
])
def test_user_errors_are_one_line_and_exit_2(capsys, error, line):
  assert _exit_and_message(capsys, error) == (cli.EXIT_USER_ERROR, line)
  assert cli.EXIT_USER_ERROR == 2


def test_bugs_are_not_swallowed():
  def main(argv):
    raise KeyError("a bug")

  with pytest.raises(KeyError):
    cli.guarded(main)(["prog"])


def test_success_passes_through():
  assert cli.guarded(lambda argv: 0)(["prog"]) == 0


@pytest.mark.parametrize("error,line", [
    # A disk full: Python's and TensorFlow's file writes.
    (OSError(errno.ENOSPC, "No space left on device", "/out/train.tfrecord"),
     "error: /out/train.tfrecord: No space left on device"),
    (tf.errors.ResourceExhaustedError(
        None, None, "/out/ckpt-1.data; No space left on device"),
     "error: /out/ckpt-1.data; No space left on device"),
    # An output path under a regular file.
    (NotADirectoryError(errno.ENOTDIR, "Not a directory", "/out/file/x"),
     "error: /out/file/x: Not a directory"),
    (tf.errors.FailedPreconditionError(
        None, None, "{{function_node __wrapped__CreateSummaryFileWriter}} "
        "/out/file is not a directory [Op:CreateSummaryFileWriter] name: "),
     "error: /out/file is not a directory"),
    (FileExistsError(errno.EEXIST, "File exists", "/out/file"),
     "error: /out/file: File exists"),
    (PermissionError(errno.EACCES, "Permission denied", "/root/out"),
     "error: /root/out: Permission denied"),
    (tf.errors.PermissionDeniedError(None, None, "/ro/x; Permission denied"),
     "error: /ro/x; Permission denied"),
    (OSError(errno.EROFS, "Read-only file system", "/ro/x"),
     "error: /ro/x: Read-only file system"),
])
def test_unwritable_paths_are_one_line_and_exit_2(capsys, error, line):
  assert _exit_and_message(capsys, error) == (2, line)


@pytest.mark.parametrize("error", [
    # Out of memory for a tensor, an uninitialized variable: not a path's.
    tf.errors.ResourceExhaustedError(
        None, None, "OOM when allocating tensor with shape[4096,4096]"),
    tf.errors.FailedPreconditionError(
        None, None, "Could not find variable dense/kernel"),
    OSError(errno.EBADF, "Bad file descriptor"),
    ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
])
def test_errors_not_about_a_path_keep_their_traceback(error):
  def main(argv):
    raise error

  with pytest.raises(type(error)):
    cli.guarded(main)(["prog"])


@gin.configurable
def _writes(write):
  write()


@pytest.mark.parametrize("write,text", [
    (lambda out: tf.io.gfile.makedirs(str(out / "model")),
     "a_file is not a directory"),
    (lambda out: tf.io.gfile.GFile(str(out / "x.json"), "w").write("{}"),
     "a_file/x.json; Not a directory"),
    (lambda out: (out / "x.json").write_text("{}"),
     "a_file/x.json: Not a directory"),
    (lambda out: os.makedirs(out), "a_file: File exists"),
    (lambda out: tf.io.gfile.GFile("/dev/full", "w").write("x" * 2**20),
     "/dev/full; No space left on device"),
])
def test_real_write_errors_name_the_path(capsys, tmp_path, write, text):
  # As the file systems raise them, and re-raised by a gin configurable
  # (as the runner's are).
  regular = tmp_path / "a_file"
  regular.write_text("")

  def main(argv):
    _writes(lambda: write(regular))

  with pytest.raises(SystemExit) as exited:
    cli.guarded(main)(["prog"])
  assert exited.value.code == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("error: ") and text in err, err
  assert "\n" not in err and "In call to" not in err, err
