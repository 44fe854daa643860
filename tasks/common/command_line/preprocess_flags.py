"""The flags every preprocess binary has, and the checks of its command line.

- `define_featurizer_flags`: the featurizer's flags
  (`define_duplicate_ids_flag`: of those whose records have ids;
  `define_global_token_ids_flag`: of those with special global tokens) and
  `featurizer_flag_values`;
- `require_flags` / `check_command_line`: the checks of the command line (a
  `UserInputError`, so that `etc_realformer.cli` prints one line, not
  absl's usage text).
"""

from typing import Any, Dict, Mapping, Sequence

from absl import flags

from etc_realformer.errors import UserInputError

# The flags `define_featurizer_flags` defines belong to (are key flags of,
# listed by `--help` of) the binary that calls it, not this module.
flags.disclaim_key_flags()


def define_featurizer_flags(global_seq_len: int,
                            long_seq_len_help: str = "Long input length."
                            ) -> None:
  """The flags of every preprocessing binary (besides `--input`): vocab,
  spm_model, output_dir, strict, long_seq_len (4096), global_seq_len,
  lower_case. Call only when run as a binary: the training binaries define
  flags of the same names."""
  flags.DEFINE_string("vocab", None, "WordPiece vocab.txt.")
  flags.DEFINE_string("spm_model", None,
                      "SentencePiece .model (instead of --vocab).")
  flags.DEFINE_string("output_dir", None, "Output directory.")
  flags.DEFINE_bool("strict", False,
                    "Fail on the first bad record instead of skipping it.")
  flags.DEFINE_integer("long_seq_len", 4096, long_seq_len_help)
  flags.DEFINE_integer("global_seq_len", global_seq_len,
                       "Global input length.")
  flags.DEFINE_bool("lower_case", True, "Uncased vocabulary.")


def define_duplicate_ids_flag() -> None:
  """`--skip_duplicate_ids`, of the binaries whose records have ids."""
  flags.DEFINE_bool(
      "skip_duplicate_ids", False,
      "Skip (and count as duplicate_id) a record whose id an earlier record "
      "of the file has, instead of refusing the file.")


def define_global_token_ids_flag(ids_class: Any) -> None:
  """`--global_token_ids`: the ids of `ids_class` (a
  `featurizing.SpecialTokenIds`), its fields in order; the help names them
  and the original's defaults per vocabulary kind."""
  names = ids_class.names()

  def defaults(by_name: Mapping[str, Any]) -> str:
    return ",".join(str(by_name[n]) for n in names)

  flags.DEFINE_list(
      "global_token_ids", None,
      f"{','.join(names)} global token ids; default: the original's for the "
      f"vocabulary kind (WordPiece {defaults(ids_class.WORDPIECE)}; "
      f"SentencePiece {defaults(ids_class.SENTENCEPIECE)}).")


def featurizer_flag_values() -> Dict[str, Any]:
  """The vocabulary, length and casing flags of `define_featurizer_flags`,
  named as the binaries' `make_featurizer` arguments: vocab, spm_model,
  long_seq_len, global_seq_len, lower_case."""
  f = flags.FLAGS
  return dict(vocab=f.vocab, spm_model=f.spm_model,
              long_seq_len=f.long_seq_len, global_seq_len=f.global_seq_len,
              lower_case=f.lower_case)


def require_flags(names: Sequence[str]) -> None:
  """Raises `UserInputError` naming the absl flags of `names` left unset."""
  missing = [f"--{n}" for n in names if flags.FLAGS[n].value in (None, "")]
  if missing:
    raise UserInputError(f"{', '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} required")


def check_command_line(argv: Sequence[str], required: Sequence[str],
                       one_of: Sequence[str] = ()) -> None:
  """A binary's command line: no positional arguments (`argv[1:]`), the
  `required` flags set, and, when given, exactly one of the `one_of` flags
  (alternative inputs).

  Raises:
    UserInputError: naming the unexpected arguments, the unset flags, or the
      alternatives.
  """
  if len(argv) > 1:
    raise UserInputError(f"unexpected arguments: {list(argv[1:])}")
  require_flags(required)
  if one_of and sum(bool(flags.FLAGS[n].value) for n in one_of) != 1:
    raise UserInputError("give exactly one of " +
                         " and ".join(f"--{n}" for n in one_of))
