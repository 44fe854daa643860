"""Tests for tasks.common.command_line.scoring: an official-metric binary's
`main` prints the scores as JSON, or names its usage."""

import json

import pytest

from etc_realformer.errors import UserInputError
from tasks.common.command_line import scoring


def test_scoring_main_prints_the_scores_of_the_two_files(capsys):
  main = scoring.scoring_main("python -m x PREDICTIONS GOLD",
                              lambda p, g: {"predictions": p, "gold": g})
  main(["x", "p.json", "g.json"])
  assert json.loads(capsys.readouterr().out) == {"predictions": "p.json",
                                                 "gold": "g.json"}
  with pytest.raises(UserInputError, match="^usage: python -m x"):
    main(["x", "p.json"])
