"""Tests for tasks.common.command_line.preprocess_flags: the command-line
checks (require_flags, check_command_line) of the preprocessing and generator
binaries, and the help of `--global_token_ids`."""

from absl import flags
import pytest

import cli_testing
from etc_realformer.errors import UserInputError
from tasks.common.command_line import preprocess_flags
from tasks.hotpotqa import features as hotpot_features
from tasks.wikihop import features as wikihop_features


_A = flags.DEFINE_string("require_flags_test_a", None, "A test flag.")


_B = flags.DEFINE_string("require_flags_test_b", "", "A test flag.")


_C = flags.DEFINE_string("require_flags_test_c", "set", "A test flag.")


def test_require_flags_names_every_unset_flag():
  preprocess_flags.require_flags(("require_flags_test_c",))
  with pytest.raises(UserInputError,
                     match="^--require_flags_test_a is required$"):
    preprocess_flags.require_flags(("require_flags_test_a",
                                    "require_flags_test_c"))
  with pytest.raises(UserInputError, match="_a, --require_flags_test_b are"):
    preprocess_flags.require_flags(("require_flags_test_a",
                                    "require_flags_test_b"))


def test_check_command_line_rejects_positional_arguments():
  preprocess_flags.check_command_line(["prog"], ("require_flags_test_c",))
  with pytest.raises(UserInputError, match=r"unexpected arguments: \['x'\]"):
    preprocess_flags.check_command_line(["prog", "x"], ())
  with pytest.raises(UserInputError, match="_a is required"):
    preprocess_flags.check_command_line(["prog"], ("require_flags_test_a",))


def test_check_command_line_wants_exactly_one_alternative():
  preprocess_flags.check_command_line(
      ["prog"], (), one_of=("require_flags_test_a", "require_flags_test_c"))
  for one_of in [("require_flags_test_a", "require_flags_test_b"),
                 ("require_flags_test_c", "require_flags_test_c")]:
    with pytest.raises(UserInputError,
                       match=f"^give exactly one of --{one_of[0]} and "
                       f"--{one_of[1]}$"):
      preprocess_flags.check_command_line(["prog"], (), one_of=one_of)


@pytest.mark.parametrize("module,input_name", [
    ("tasks.nq.preprocess", "nq-dev-07.jsonl.gz"),
    ("tasks.openkp.preprocess", "OpenKPDev.jsonl"),
])
def test_cli_missing_input_is_one_line(module, input_name, tmp_path):
  missing = str(tmp_path / input_name)
  # The vocabulary is missing too: the input is checked before it is read.
  # In this process: each binary's own process runs in its strict test.
  line = cli_testing.user_error_line_here(
      module, [f"--input={missing}", f"--vocab={tmp_path / 'no_vocab.txt'}",
               f"--output_dir={tmp_path / 'out'}"])
  assert missing in line
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("ids_class,help_text", [
    (hotpot_features.GlobalTokenIds,
     "cls,sentence,question,paragraph global token ids; default: the "
     "original's for the vocabulary kind (WordPiece [CLS],1,3,5; "
     "SentencePiece 40,1,41,43)."),
    (wikihop_features.GlobalTokenIds,
     "sentence,question,candidate,paragraph global token ids; default: the "
     "original's for the vocabulary kind (WordPiece 1,3,4,5; SentencePiece "
     "1,41,42,43)."),
])
def test_global_token_ids_flag_names_the_fields_and_defaults(
    ids_class, help_text, monkeypatch):
  defined = []
  monkeypatch.setattr(flags, "DEFINE_list",
                      lambda *args, **kwargs: defined.append(args))
  preprocess_flags.define_global_token_ids_flag(ids_class)
  assert defined == [("global_token_ids", None, help_text)]
