"""In-graph helpers the task featurizers share, and their special token ids.

- `fit`: crop or pad a tensor's first axis to a static length (every
  featurizer's last step: the fixed [L] / [G] shapes of the TFRecords);
- `last_of_run`: 1 at the last position of each run of equal ids (the
  breakpoints of a paragraph / sentence structure);
- `special_ids` and `SpecialTokenIds`: the ids a featurizer writes besides
  the text's own pieces (global CLS / sentence / question tokens, ...), per
  vocabulary kind. A task declares its ids as a frozen dataclass that
  subclasses `SpecialTokenIds`, with one table per kind mapping each field to
  a fixed id or to a vocabulary entry looked up by name;
- `Featurizer`: the base of the task featurizers (a `tf.Module` holding the
  tokenizer and the two sequence lengths);
- `TaskFeaturizer`: the entry points every task's featurizer has, by the
  same names (WikiHop, HotpotQA, NQ, OpenKP; pre-training's documents give
  many examples each, cut in Python, and have a featurizer of their own).
"""

import dataclasses
from typing import (Any, Callable, ClassVar, Dict, Mapping, Optional,
                    Protocol, Sequence, Tuple, TypeVar, Union)

import tensorflow as tf

from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError
from tasks.common.featurization import tokenization

# A special id: fixed (int) or the id of a vocabulary entry (its name).
IdSource = Union[int, str]


def fit(values: tf.Tensor, length: int, pad_value: Any) -> tf.Tensor:
  """Crops or pads the first axis of `values` to the static `length`.

  Args:
    values: a tensor of known rank (its trailing axes are kept as they are).
    length: the output's first dimension.
    pad_value: the value of the added positions.

  Returns:
    `values[:length]`, padded at the end with `pad_value`; static shape
    `[length, *values.shape[1:]]`.
  """
  values = values[:length]
  pad = [[0, length - tf.shape(values)[0]]] + [[0, 0]] * (
      values.shape.rank - 1)
  padded = tf.pad(values, pad, constant_values=pad_value)
  return tf.ensure_shape(padded, [length] + values.shape[1:].as_list())


def last_of_run(ids: tf.Tensor) -> tf.Tensor:
  """<int32>[N]: 1 where ids[i] != ids[i + 1] or i is the last position.

  Args:
    ids: <int32>[N], e.g. the paragraph of each token.
  """
  next_ids = tf.concat([ids[1:], [-(2**31) + 1]], axis=0)
  return tf.cast(tf.not_equal(ids, next_ids), tf.int32)


def special_ids(tokenizer: tokenization.Tokenizer,
                wordpiece: Mapping[str, IdSource],
                sentencepiece: Mapping[str, IdSource]) -> Dict[str, int]:
  """The special ids for `tokenizer`'s vocabulary kind.

  Args:
    tokenizer: a WordPiece or SentencePiece tokenizer.
    wordpiece, sentencepiece: name -> a fixed id, or the vocabulary entry
      whose id it is (looked up with `tokenizer.token_id`).

  Returns:
    name -> id, for the table of the tokenizer's kind.

  Raises:
    UserInputError: an entry is missing from the vocabulary (the message
      names the vocabulary file and the entries).
  """
  tables = {tokenization.WORDPIECE: wordpiece,
            tokenization.SENTENCEPIECE: sentencepiece}
  if tokenizer.kind not in tables:
    raise ValueError(f"unknown tokenizer kind {tokenizer.kind!r}")
  ids, missing = {}, []
  for name, source in tables[tokenizer.kind].items():
    if isinstance(source, str):
      ids[name] = tokenizer.token_id(source)
      if ids[name] is None:
        missing.append(f"{name}={source!r}")
    else:
      ids[name] = int(source)
  if missing:
    path = (getattr(tokenizer, "vocab_path", None) or
            getattr(tokenizer, "model_path", None) or "the vocabulary")
    raise UserInputError(
        f"{path}: no entry for the special tokens {', '.join(missing)}; "
        "pass the ids explicitly")
  return ids


S = TypeVar("S", bound="SpecialTokenIds")


class SpecialTokenIds:
  """Base of a task's special-id dataclass.

  Example:
    @dataclasses.dataclass(frozen=True)
    class GlobalTokenIds(featurizing.SpecialTokenIds):
      cls: int
      sentence: int
      WORDPIECE: ClassVar = {"cls": "[CLS]", "sentence": 1}
      SENTENCEPIECE: ClassVar = {"cls": 40, "sentence": 1}

    ids = GlobalTokenIds.for_tokenizer(tokenizer)
  """

  WORDPIECE: ClassVar[Mapping[str, IdSource]] = {}
  SENTENCEPIECE: ClassVar[Mapping[str, IdSource]] = {}

  @classmethod
  def for_tokenizer(cls: type[S], tokenizer: tokenization.Tokenizer) -> S:
    """The task's defaults for the tokenizer's vocabulary (`special_ids`)."""
    return cls(**special_ids(tokenizer, cls.WORDPIECE, cls.SENTENCEPIECE))

  @classmethod
  def names(cls) -> Tuple[str, ...]:
    """The fields in order (e.g. for a `--global_token_ids` flag's help)."""
    return tuple(f.name for f in dataclasses.fields(cls))

  @classmethod
  def from_flag(cls: type[S], values: Optional[Sequence[str]],
                flag: str) -> Optional[S]:
    """The ids of a list flag's strings (one per field, in order); None when
    the flag is not given (the vocabulary's defaults apply).

    Raises:
      UserInputError: not one integer per field (the message names the flag
        and the fields).
    """
    if not values:
      return None
    names = ",".join(cls.names())
    try:
      ids = [int(v) for v in values]
    except ValueError as e:
      raise UserInputError(f"--{flag}: {names} must be integers, got "
                           f"{list(values)}") from e
    if len(ids) != len(cls.names()):
      raise UserInputError(f"--{flag} needs {len(cls.names())} ids: {names}; "
                           f"got {list(values)}")
    return cls(*ids)


class Featurizer(tf.Module):
  """Base of the task featurizers: the tokenizer and the sequence lengths.

  A featurizer is a `tf.Module`, so an exporter can attach it to the model
  and run its graph code inside a serving signature.
  """

  def __init__(self, name: str,
               vocab_path: Optional[str] = None,
               spm_model_path: Optional[str] = None,
               tokenizer: Optional[tokenization.Tokenizer] = None,
               long_seq_len: int = 4096,
               global_seq_len: int = 512,
               lower_case: bool = True,
               min_seq_len: int = 1):
    """The task's featurizer's common settings.

    Args:
      name: the module's name.
      vocab_path: a BERT `vocab.txt` (WordPiece).
      spm_model_path: a SentencePiece `.model` (instead of `vocab_path`).
      tokenizer: a ready tokenizer (instead of both paths).
      long_seq_len: L, the long input length.
      global_seq_len: G, the global input length.
      lower_case: uncased vocabulary (lower-case; WordPiece also strips
        accents).
      min_seq_len: the shortest L and G the task's segments can use.

    Raises:
      UserInputError: a length below `min_seq_len` (checked before the
        vocabulary is read), or an unusable vocabulary.
    """
    super().__init__(name=name)
    if long_seq_len < min_seq_len or global_seq_len < min_seq_len:
      raise UserInputError(
          f"sequence lengths must be at least {min_seq_len}, got long "
          f"{long_seq_len}, global {global_seq_len}")
    if tokenizer is None:
      tokenizer = tokenization.make_tokenizer(vocab_path, spm_model_path,
                                              lower_case=lower_case)
    self.tokenizer = tokenizer
    self.long_seq_len = int(long_seq_len)
    self.global_seq_len = int(global_seq_len)


Tensors = Dict[str, tf.Tensor]


class TaskFeaturizer(Protocol):
  """What every task's featurizer offers, by the same names.

  One record's inputs are graph tensors (`record_inputs(record)` in the
  task's features module, or the serving signature's); the three forms are:

  - `featurize_with_stats(*inputs)`: the traced form with stats, TF ops
    only: (features, <int32>[] truncation stats). `record_fn` is the same
    function compiled once for `tf.data`, which the preprocess step runs;
  - `featurize_record(record)`: one validated record, eagerly: numpy
    features and Python int stats (HotpotQA adds its labels' skip reason);
  - `featurize(*inputs)`: the serving form, features only, what a raw
    serving signature calls (NQ and OpenKP take the raw document: tokens
    with HTML flags, text with its VDOM JSON).

  `feature_spec()` names what they return (unbatched).
  """

  long_seq_len: int
  global_seq_len: int

  def feature_spec(self) -> tfrecords.FeatureSpec:
    ...

  @property
  def record_fn(self) -> Callable[..., Tuple[Tensors, Tensors]]:
    ...

  def featurize_with_stats(self, *inputs: Any, **kwargs: Any
                           ) -> Tuple[Tensors, Tensors]:
    ...

  def featurize_record(self, record: Any) -> Tuple[Any, ...]:
    ...

  def featurize(self, *inputs: Any, **kwargs: Any) -> Tensors:
    ...


# The entry points of `TaskFeaturizer`, for checks of a task's featurizer.
ENTRY_POINTS = ("feature_spec", "record_fn", "featurize_with_stats",
                "featurize_record", "featurize")
