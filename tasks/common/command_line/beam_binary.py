"""A Beam preprocess binary's `main`: its arguments and its stop signals.

`run_binary(main)` runs `main` under `etc_realformer.cli` with the flags
absl does not know left to Beam (`beam_args_of`), and SIGTERM or Ctrl-C
raising `Stopped` so that the run's cleanup removes its work folder (exit
code 128 + the signal's number). `check_command_line` is
`preprocess_flags.check_command_line` for such a binary.
"""

import contextlib
import signal
import sys
import threading
from typing import Callable, List, Optional, Sequence

from absl import app
from absl import flags

from etc_realformer import cli
from etc_realformer.errors import UserInputError
from tasks.common.command_line import preprocess_flags


class Stopped(SystemExit):
  """SIGTERM (or SIGINT) arrived: raised in the main thread so that the run's
  `finally` blocks remove its work folder (the default action would kill the
  process at once); the process then exits with 128 + the signal's number, as a
  killed one, without a traceback."""


@contextlib.contextmanager
def _stop_signals_raise():
  """SIGTERM and SIGINT (Ctrl-C) raise `Stopped` while the block runs;
  outside the main thread nothing changes.

  Beam wraps what a transform raises (a RuntimeError naming the step): the
  block's error, once the signal came, is `Stopped` again.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  received = []

  def handler(signum, frame):
    del frame  # Unused.
    received.append(signum)
    raise Stopped(128 + signum)

  previous = {signum: signal.signal(signum, handler)
              for signum in (signal.SIGTERM, signal.SIGINT)}
  try:
    yield
  except BaseException:
    if received:
      raise Stopped(128 + received[0]) from None
    raise
  finally:
    for signum, action in previous.items():
      signal.signal(signum, action)


# ---------------------------------------------------------------- binaries
def _parse_known_flags(argv: List[str]) -> List[str]:
  """absl's flags; the rest (Beam's options, positional arguments) is left
  to `main`."""
  try:
    return flags.FLAGS(argv, known_only=True)
  except flags.Error as e:
    print(f"error: {e}", file=sys.stderr, flush=True)
    sys.exit(cli.EXIT_USER_ERROR)


def beam_args_of(argv: Sequence[str]) -> List[str]:
  """The Beam options among `main`'s arguments (after the program name).

  Raises:
    UserInputError: a positional argument.
  """
  positional = [a for a in argv[1:] if not a.startswith("-")]
  if positional:
    raise UserInputError(f"unexpected arguments: {positional}")
  return list(argv[1:])


def run_binary(main: Callable[[List[str]], Optional[int]]) -> None:
  """`cli.run` for a preprocess binary: flags absl does not know are left
  in `main`'s argv for Beam (`beam_args_of`); SIGTERM stops it as Ctrl-C
  does, through its cleanup (`Stopped`), on every path (a TFDS input's
  single-process run too)."""
  def stoppable(argv):
    with _stop_signals_raise():
      return main(argv)
  app.run(cli.guarded(stoppable), flags_parser=_parse_known_flags)


def check_command_line(argv: Sequence[str], required: Sequence[str],
                       one_of: Sequence[str] = ()) -> List[str]:
  """`preprocess_flags.check_command_line` for a Beam binary; returns the Beam
  options."""
  beam_args = beam_args_of(argv)
  preprocess_flags.check_command_line(argv[:1], required, one_of)
  return beam_args
