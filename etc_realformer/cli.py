"""What every binary of the project shares: a user's mistake is one line on
stderr and exit code 2, not a traceback.

    if __name__ == "__main__":
      cli.run(main)

A user's mistake is a `UserInputError` (a bad file, record, vocabulary,
config or checkpoint), a file that does not exist, a gin file or binding
that does not parse, or a path that cannot be written: a full disk, a
folder under a regular file, no permission, a read-only file system
(`OSError`, or TensorFlow's file errors that say so about a path). Anything
else is a bug and keeps its traceback; a tensor that does not fit in memory
(also a `ResourceExhaustedError`) is not a user's mistake.
"""

import errno
import os
import re
import sys
from typing import Callable, List, Optional

from absl import app
from absl import flags
import tensorflow as tf

from etc_realformer.errors import UserInputError

EXIT_USER_ERROR = 2

USER_ERRORS = (UserInputError, FileNotFoundError, NotADirectoryError,
               IsADirectoryError, tf.errors.NotFoundError)

# What the file system says when a path the user chose cannot be written
# (or read): the disk is full, a folder on the way is a regular file, no
# permission, read-only, a file stands where a folder is to be made.
PATH_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EISDIR,
               errno.EACCES, errno.EPERM, errno.EROFS, errno.EEXIST)
# TensorFlow's file system reports those as these error classes, with the
# path and the C library's text in the message ("<path>; Not a directory",
# "<path> is not a directory"). The same classes also come from ops that
# are not about files (an out-of-memory tensor is a ResourceExhaustedError,
# an uninitialized variable a FailedPreconditionError): only a message
# holding one of these texts is a path's.
TF_FILE_ERRORS = (tf.errors.FailedPreconditionError,
                  tf.errors.PermissionDeniedError,
                  tf.errors.ResourceExhaustedError,
                  tf.errors.AlreadyExistsError)
_PATH_ERROR_TEXTS = re.compile(
    "|".join(re.escape(os.strerror(n)) for n in PATH_ERRNOS) +
    "|is not a directory", re.IGNORECASE)


def is_path_error(error: BaseException) -> bool:
  """Whether `error` says that a path cannot be written or read (a user's
  mistake or the machine's state, not a bug)."""
  if isinstance(error, TF_FILE_ERRORS):
    return bool(_PATH_ERROR_TEXTS.search(_tf_message(error)))
  return isinstance(error, OSError) and error.errno in PATH_ERRNOS


def _tf_message(error: tf.errors.OpError) -> str:
  """An op error's own text: without the eager function prefix
  ("{{function_node ...}}") and the op suffix ("[Op:Name] name: ")."""
  text = error.message.strip().splitlines()[0] if error.message.strip() else ""
  text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", text)
  return re.sub(r"\s*\[Op:[^\]]*\].*$", "", text).strip()


def _os_error_text(error: OSError) -> str:
  """"<path>: <what the system says>" (both paths of a rename)."""
  what = error.strerror or str(error)
  paths = [p for p in (error.filename, error.filename2) if p is not None]
  if not paths:
    return what
  return " -> ".join(os.fsdecode(p) for p in paths) + f": {what}"


def unwrap_gin(error: BaseException) -> BaseException:
  """The exception that a gin configurable re-raised.

  Gin re-raises an error from inside a configurable as an instance of a
  subclass of its type whose `str` appends "In call to configurable ...";
  that instance lacks the original's `OSError` fields (errno, filename),
  so the original, its `__context__`, is the one to read.
  """
  while (error.__context__ is not None and error.__suppress_context__ and
         type(error).__bases__ == (type(error.__context__),) and
         type(error).__name__ == type(error.__context__).__name__):
    error = error.__context__
  return error


def user_error_line(error: BaseException) -> str:
  """The one line printed for a user's mistake."""
  error = unwrap_gin(error)
  text = str(error).strip() or type(error).__name__
  if isinstance(error, tf.errors.NotFoundError):
    text = error.message
  elif isinstance(error, TF_FILE_ERRORS):
    text = _tf_message(error)
  elif (isinstance(error, OSError) and error.errno is not None and
        error.strerror and not isinstance(error, UserInputError)):
    # "[Errno 28] No space left on device: 'x'" -> "x: No space left ...".
    text = _os_error_text(error)
  # gin appends "In call to configurable ..." lines to an error raised
  # inside a configurable; the user's line is what the code said.
  lines = [line for line in text.splitlines()
           if not line.strip().startswith("In call to configurable")]
  return "error: " + " ".join(line.strip() for line in lines if line.strip())


def guarded(main: Callable[[List[str]], Optional[int]]
            ) -> Callable[[List[str]], Optional[int]]:
  """`main` with user mistakes turned into one line and exit code 2."""
  def wrapped(argv):
    try:
      return main(argv)
    except USER_ERRORS as e:
      fail(e)
    except (OSError, *TF_FILE_ERRORS) as e:
      if not is_path_error(unwrap_gin(e)):
        raise
      fail(e)
  return wrapped


def fail(error: BaseException) -> None:
  """Prints a user's mistake as one line and exits with code 2."""
  print(user_error_line(error), file=sys.stderr, flush=True)
  sys.exit(EXIT_USER_ERROR)


# Packages whose flags are a binary's own (the rest are TensorFlow's,
# absl's or Beam's).
PROJECT_PACKAGES = ("etc_realformer", "tasks", "tools", "demos")


def adopt_project_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Makes every flag that this project's modules define a key flag of the
  main module, so that `--help` lists them.

  absl's `--help` lists only the key flags of `sys.argv[0]`: a binary
  whose flags come from a shared module (`tasks/run.py`,
  `tasks/common/command_line/preprocess_flags.py`) would list none, and
  `--helpfull` buries them among TensorFlow's.
  """
  main_module = sys.argv[0]
  for module, defined in flag_values.flags_by_module_dict().items():
    if module == main_module or module.split(".")[0] not in PROJECT_PACKAGES:
      continue
    for flag in defined:
      flag_values.register_key_flag_for_module(main_module, flag)


def run(main: Callable[[List[str]], Optional[int]]) -> None:
  """`absl.app.run(main)` with `guarded` around it, and `--help` listing
  the binary's own flags."""
  adopt_project_flags()
  app.run(guarded(main))
