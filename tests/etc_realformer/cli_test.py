"""A user's mistake is one line on stderr and exit code 2; a bug keeps its
traceback."""

import pytest

from etc_realformer import cli
from etc_realformer.errors import UserInputError


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
  def main(argv):
    raise error

  with pytest.raises(SystemExit) as exited:
    cli.guarded(main)(["prog"])
  assert exited.value.code == cli.EXIT_USER_ERROR == 2
  err = capsys.readouterr().err
  assert err.strip() == line


def test_bugs_are_not_swallowed():
  def main(argv):
    raise KeyError("a bug")

  with pytest.raises(KeyError):
    cli.guarded(main)(["prog"])


def test_success_passes_through():
  assert cli.guarded(lambda argv: 0)(["prog"]) == 0
