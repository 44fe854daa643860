"""The `main` of the official-metric binaries (`python -m ... PREDICTIONS
GOLD`)."""

import json
from typing import Any, Callable, List

from etc_realformer.errors import UserInputError


def scoring_main(usage: str, score_files: Callable[[str, str], Any]
                 ) -> Callable[[List[str]], None]:
  """The `main` of an official-metric binary, `python -m ... PREDICTIONS
  GOLD`: `score_files(PREDICTIONS, GOLD)` printed as JSON.

  Args:
    usage: the command line, for the error when the two files are not given.
    score_files: (predictions path, gold path) -> the JSON-able scores.
  """
  def main(argv: List[str]) -> None:
    if len(argv) != 3:
      raise UserInputError(f"usage: {usage}")
    print(json.dumps(score_files(argv[1], argv[2]), indent=2))
  return main
