"""The error a user's mistake raises, so that binaries can tell it apart.

A missing or malformed file, a bad record under `--strict`, a vocabulary
that cannot be used, a config value out of range, a checkpoint that does not
fit the model: each raises a `UserInputError` (or a subclass) whose message
names the file, record and field. The binaries (`etc_realformer.cli`) print
that message as one line and exit with code 2 instead of a traceback;
library callers can catch it like any `ValueError`.
"""


class UserInputError(ValueError):
  """Something the user gave cannot be used; the message says what and where."""
