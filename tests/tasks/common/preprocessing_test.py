"""Tests for tasks.common.preprocessing's command-line checks (require_flags,
check_command_line) of the preprocessing and generator binaries."""

from absl import flags
import pytest

from etc_realformer.errors import UserInputError
from tasks.common import preprocessing

_A = flags.DEFINE_string("require_flags_test_a", None, "A test flag.")
_B = flags.DEFINE_string("require_flags_test_b", "", "A test flag.")
_C = flags.DEFINE_string("require_flags_test_c", "set", "A test flag.")


def test_require_flags_names_every_unset_flag():
  preprocessing.require_flags(("require_flags_test_c",))
  with pytest.raises(UserInputError,
                     match="^--require_flags_test_a is required$"):
    preprocessing.require_flags(("require_flags_test_a",
                                 "require_flags_test_c"))
  with pytest.raises(UserInputError, match="_a, --require_flags_test_b are"):
    preprocessing.require_flags(("require_flags_test_a",
                                 "require_flags_test_b"))


def test_check_command_line_rejects_positional_arguments():
  preprocessing.check_command_line(["prog"], ("require_flags_test_c",))
  with pytest.raises(UserInputError, match=r"unexpected arguments: \['x'\]"):
    preprocessing.check_command_line(["prog", "x"], ())
  with pytest.raises(UserInputError, match="_a is required"):
    preprocessing.check_command_line(["prog"], ("require_flags_test_a",))
