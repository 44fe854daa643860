"""What every binary of the project shares: a user's mistake is one line on
stderr and exit code 2, not a traceback.

    if __name__ == "__main__":
      cli.run(main)

A user's mistake is a `UserInputError` (a bad file, record, vocabulary,
config or checkpoint), a file that does not exist, or a gin file or binding
that does not parse. Anything else is a bug and keeps its traceback.
"""

import sys
from typing import Callable, List, Optional

from absl import app
from absl import flags
import tensorflow as tf

from etc_realformer.errors import UserInputError

EXIT_USER_ERROR = 2

USER_ERRORS = (UserInputError, FileNotFoundError, NotADirectoryError,
               IsADirectoryError, tf.errors.NotFoundError)


def user_error_line(error: BaseException) -> str:
  """The one line printed for a user's mistake."""
  text = str(error).strip() or type(error).__name__
  if isinstance(error, tf.errors.NotFoundError):
    text = error.message
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
      print(user_error_line(e), file=sys.stderr, flush=True)
      sys.exit(EXIT_USER_ERROR)
  return wrapped


# Packages whose flags are a binary's own (the rest are TensorFlow's,
# absl's or Beam's).
PROJECT_PACKAGES = ("etc_realformer", "tasks", "tools", "demos")


def adopt_project_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Makes every flag that this project's modules define a key flag of the
  main module, so that `--help` lists them.

  absl's `--help` lists only the key flags of `sys.argv[0]`: a binary
  whose flags come from a shared module (`tasks/run.py`,
  `tasks/common/preprocessing.py`) would list none, and `--helpfull` buries
  them among TensorFlow's.
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
