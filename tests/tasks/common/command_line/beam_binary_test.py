"""Tests for tasks.common.command_line.beam_binary: a Beam binary's arguments
(positional ones refused, the rest left to Beam) and its stop signal."""

import os
import signal

import pytest

from etc_realformer.errors import UserInputError
from tasks.common.command_line import beam_binary


def test_beam_args_are_the_arguments_absl_left():
  assert beam_binary.beam_args_of(["prog", "--runner=DirectRunner"]) == [
      "--runner=DirectRunner"]
  with pytest.raises(UserInputError, match=r"unexpected arguments: \['x'\]"):
    beam_binary.beam_args_of(["prog", "x", "--runner=DirectRunner"])


def test_sigterm_raises_stopped_with_the_signals_exit_code():
  with pytest.raises(beam_binary.Stopped) as stopped:
    with beam_binary._stop_signals_raise():  # pylint: disable=protected-access
      os.kill(os.getpid(), signal.SIGTERM)
      signal.pause()
  assert stopped.value.code == 128 + signal.SIGTERM
