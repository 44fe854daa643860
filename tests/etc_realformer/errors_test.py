"""The error a user's mistake raises (`etc_realformer/errors.py`)."""

import pytest

from etc_realformer.errors import UserInputError


def test_is_a_value_error_that_keeps_its_message():
  # Library callers catch it as a ValueError; the binaries print the
  # message as one line.
  with pytest.raises(ValueError, match=r"^data\.json: record 3: field "
                     r"'answer' is missing$"):
    raise UserInputError("data.json: record 3: field 'answer' is missing")

