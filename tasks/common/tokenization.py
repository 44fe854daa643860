"""In-graph tokenizers for the two vocabularies of the released checkpoints.

Both wrappers are `tf.Module`s, so a featurizer that owns one can be saved in a
SavedModel and tokenize raw strings inside a serving signature. Tokenization
is done with tensorflow-text ops only (no Python in the graph):

- WordPiece from a BERT `vocab.txt` (`tf_text.FastBertTokenizer`, with BERT's
  basic pre-tokenization: split on whitespace and punctuation, and, for uncased
  vocabularies, lower-casing with accent stripping);
- SentencePiece from a `.model` file (`tf_text.SentencepieceTokenizer`),
  optionally lower-casing first as the ALBERT-style ETC vocabulary expects.
"""

import abc
from typing import List, Optional, Sequence, Tuple

import tensorflow as tf
import tensorflow_text as tf_text

from etc_realformer.errors import UserInputError

WORDPIECE = "wordpiece"
SENTENCEPIECE = "sentencepiece"

# A sentence ends at `.`, `!` or `?` (optionally followed by closing quotes or
# brackets) and whitespace, unless the character before the punctuation is an
# upper-case letter: that keeps initials and acronyms ("J. R. R.", "U.S.")
# together. RE2 has no look-behind, so the character is captured and put back.
_SENTENCE_END = r"([^\s\p{Lu}.!?][.!?]+[\"'\)\]]*)\s+"
# ASCII record separator: never produced by the pattern above from real text.
_SENTENCE_MARK = "\x1e"


def split_sentences(docs: tf.Tensor) -> tf.RaggedTensor:
  """Splits documents into sentences with a regex (no model download).

  Args:
    docs: <string>[D] documents.

  Returns:
    <string>[D, (num_sentences)] stripped, non-empty sentences per document.
  """
  docs = tf.convert_to_tensor(docs, tf.string)
  # Stray record separators in the input would split a sentence; blank them.
  docs = tf.strings.regex_replace(docs, _SENTENCE_MARK, " ")
  marked = tf.strings.regex_replace(docs, _SENTENCE_END,
                                    "\\1" + _SENTENCE_MARK)
  sentences = tf.strings.strip(tf.strings.split(marked, _SENTENCE_MARK))
  return tf.ragged.boolean_mask(sentences, tf.strings.length(sentences) > 0)


class Tokenizer(tf.Module, metaclass=abc.ABCMeta):
  """Turns strings into int32 token ids, in the TF graph."""

  kind: str

  def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    """<string>[N] -> <int32>[N, (num_tokens)]."""
    return self.tokenize_with_offsets(texts)[0]

  @abc.abstractmethod
  def tokenize_with_offsets(
      self, texts: tf.Tensor
  ) -> Tuple[tf.RaggedTensor, tf.RaggedTensor, tf.RaggedTensor]:
    """Token ids with byte offsets [start, end) into each input string.

    Args:
      texts: <string>[N].

    Returns:
      <int32>[N, (n)] ids, and <int32>[N, (n)] start and end byte offsets.
    """

  @abc.abstractmethod
  def token_id(self, token: str) -> Optional[int]:
    """The id of a vocabulary entry, None when the vocabulary lacks it."""

  @property
  @abc.abstractmethod
  def vocab_size(self) -> int:
    """Number of ids in the vocabulary."""

  def tokenize_py(self, text: str) -> List[int]:
    """Eager convenience for tests and tools: one string -> its ids."""
    return self.tokenize(tf.constant([text]))[0].numpy().tolist()


def _flat_int32(*tensors: tf.RaggedTensor) -> Tuple[tf.RaggedTensor, ...]:
  """[N, (words), (pieces)] -> [N, (pieces)] int32 (tf_text versions differ
  in whether they return the word level)."""
  out = []
  for t in tensors:
    while t.shape.rank > 2:
      t = t.merge_dims(-2, -1)
    out.append(tf.cast(t, tf.int32))
  return tuple(out)


def read_vocab(vocab_path: str) -> List[str]:
  """Reads a BERT `vocab.txt` (one token per line, id = line number).

  Raises:
    FileNotFoundError: no such file.
    UserInputError: the file is empty or lists a token twice (the
      tokenizer needs unique tokens); the message names the file and lines.
  """
  if not tf.io.gfile.exists(vocab_path):
    raise FileNotFoundError(f"{vocab_path}: vocabulary file not found")
  with tf.io.gfile.GFile(vocab_path, "rb") as f:
    raw = f.read()
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise UserInputError(f"{vocab_path}: vocabulary is not UTF-8 text "
                         f"(byte {e.start})") from e
  tokens = [line.rstrip("\r") for line in text.split("\n")]
  # A trailing empty line is an artefact of the file, not a token.
  while tokens and not tokens[-1]:
    tokens.pop()
  if not tokens:
    raise UserInputError(f"{vocab_path}: empty vocabulary file")
  first = {}
  for line, token in enumerate(tokens, 1):
    if token in first:
      raise UserInputError(
          f"{vocab_path}: line {line}: token {token!r} already on line "
          f"{first[token]} (a vocabulary lists each token once)")
    first[token] = line
  return tokens


class WordPieceTokenizer(Tokenizer):
  """BERT WordPiece tokenization from a `vocab.txt`."""

  kind = WORDPIECE

  def __init__(self, vocab_path: str, lower_case: bool = True,
               unknown_token: str = "[UNK]"):
    super().__init__(name="wordpiece_tokenizer")
    self._vocab = read_vocab(vocab_path)
    self._ids = {t: i for i, t in enumerate(self._vocab)}
    if unknown_token not in self._ids:
      raise UserInputError(f"{vocab_path}: no {unknown_token!r} token")
    self.vocab_path = vocab_path
    self.lower_case = lower_case
    # FastBertTokenizer serializes its model into a constant: nothing to track
    # for a SavedModel, no lookup table to initialize.
    self._tokenizer = tf_text.FastBertTokenizer(
        vocab=self._vocab, token_out_type=tf.int32,
        unknown_token=unknown_token,
        lower_case_nfd_strip_accents=lower_case)

  @property
  def vocab(self) -> List[str]:
    return list(self._vocab)

  @property
  def vocab_size(self) -> int:
    return len(self._vocab)

  def token_id(self, token: str) -> Optional[int]:
    return self._ids.get(token)

  def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    texts = tf.convert_to_tensor(texts, tf.string)
    return _flat_int32(self._tokenizer.tokenize(texts))[0]

  def tokenize_with_offsets(self, texts: tf.Tensor):
    texts = tf.convert_to_tensor(texts, tf.string)
    return _flat_int32(*self._tokenizer.tokenize_with_offsets(texts))


class SentencePieceTokenizer(Tokenizer):
  """SentencePiece tokenization from a `.model` file."""

  kind = SENTENCEPIECE

  def __init__(self, model_path: str, lower_case: bool = True):
    super().__init__(name="sentencepiece_tokenizer")
    with tf.io.gfile.GFile(model_path, "rb") as f:
      model = f.read()
    if not model:
      raise UserInputError(f"{model_path}: empty SentencePiece model file")
    self.model_path = model_path
    self.lower_case = lower_case
    self._tokenizer = tf_text.SentencepieceTokenizer(model=model,
                                                     out_type=tf.int32)
    self._vocab_size = int(self._tokenizer.vocab_size().numpy())

  @property
  def vocab_size(self) -> int:
    return self._vocab_size

  def _normalized(self, texts: tf.Tensor) -> tf.Tensor:
    texts = tf.convert_to_tensor(texts, tf.string)
    if self.lower_case:
      # Lower-casing keeps byte lengths for all but a few non-ASCII letters,
      # so offsets stay offsets into the original text.
      texts = tf.strings.lower(texts, encoding="utf-8")
    return texts

  def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    return _flat_int32(self._tokenizer.tokenize(self._normalized(texts)))[0]

  def tokenize_with_offsets(self, texts: tf.Tensor):
    return _flat_int32(
        *self._tokenizer.tokenize_with_offsets(self._normalized(texts)))

  def token_id(self, token: str) -> Optional[int]:
    ids = self._tokenizer.string_to_id(tf.constant([token, "<unk>"]))
    token_id, unk = (int(i) for i in ids.numpy())
    return None if token_id == unk and token != "<unk>" else token_id


def make_tokenizer(vocab_path: Optional[str] = None,
                   spm_model_path: Optional[str] = None,
                   lower_case: bool = True) -> Tokenizer:
  """Builds the tokenizer for exactly one of `vocab_path` / `spm_model_path`."""
  if bool(vocab_path) == bool(spm_model_path):
    raise UserInputError("Give exactly one of vocab_path (WordPiece vocab.txt) and "
                     "spm_model_path (SentencePiece .model); got "
                     f"vocab_path={vocab_path!r}, "
                     f"spm_model_path={spm_model_path!r}")
  if vocab_path:
    return WordPieceTokenizer(vocab_path, lower_case=lower_case)
  return SentencePieceTokenizer(spm_model_path, lower_case=lower_case)


def write_vocab(path: str, tokens: Sequence[str]) -> None:
  """Writes a `vocab.txt` (used by the synthetic data and by tests)."""
  if len(set(tokens)) != len(tokens):
    raise UserInputError("duplicate tokens in vocabulary")
  with tf.io.gfile.GFile(path, "w") as f:
    f.write("".join(t + "\n" for t in tokens))
