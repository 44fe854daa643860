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
from typing import List, Optional, Sequence

import tensorflow as tf
import tensorflow_text as tf_text

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

  @abc.abstractmethod
  def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    """<string>[N] -> <int32>[N, (num_tokens)]."""

  @property
  @abc.abstractmethod
  def vocab_size(self) -> int:
    """Number of ids in the vocabulary."""

  def tokenize_py(self, text: str) -> List[int]:
    """Eager convenience for tests and tools: one string -> its ids."""
    return self.tokenize(tf.constant([text]))[0].numpy().tolist()


def read_vocab(vocab_path: str) -> List[str]:
  """Reads a BERT `vocab.txt` (one token per line, id = line number)."""
  with tf.io.gfile.GFile(vocab_path, "r") as f:
    tokens = [line.rstrip("\n").rstrip("\r") for line in f]
  # A trailing empty line is an artefact of the file, not a token.
  while tokens and not tokens[-1]:
    tokens.pop()
  if not tokens:
    raise ValueError(f"{vocab_path}: empty vocabulary file")
  return tokens


class WordPieceTokenizer(Tokenizer):
  """BERT WordPiece tokenization from a `vocab.txt`."""

  kind = WORDPIECE

  def __init__(self, vocab_path: str, lower_case: bool = True,
               unknown_token: str = "[UNK]"):
    super().__init__(name="wordpiece_tokenizer")
    self._vocab = read_vocab(vocab_path)
    if unknown_token not in self._vocab:
      raise ValueError(f"{vocab_path}: no {unknown_token!r} token")
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

  def token_id(self, token: str) -> int:
    return self._vocab.index(token)

  def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    texts = tf.convert_to_tensor(texts, tf.string)
    ids = self._tokenizer.tokenize(texts)
    # Older/newer tf_text may return [N, words, pieces]; flatten to pieces.
    while ids.shape.rank > 2:
      ids = ids.merge_dims(-2, -1)
    return tf.cast(ids, tf.int32)


class SentencePieceTokenizer(Tokenizer):
  """SentencePiece tokenization from a `.model` file."""

  kind = SENTENCEPIECE

  def __init__(self, model_path: str, lower_case: bool = True):
    super().__init__(name="sentencepiece_tokenizer")
    with tf.io.gfile.GFile(model_path, "rb") as f:
      model = f.read()
    if not model:
      raise ValueError(f"{model_path}: empty SentencePiece model file")
    self.model_path = model_path
    self.lower_case = lower_case
    self._tokenizer = tf_text.SentencepieceTokenizer(model=model,
                                                     out_type=tf.int32)
    self._vocab_size = int(self._tokenizer.vocab_size().numpy())

  @property
  def vocab_size(self) -> int:
    return self._vocab_size

  def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    texts = tf.convert_to_tensor(texts, tf.string)
    if self.lower_case:
      texts = tf.strings.lower(texts, encoding="utf-8")
    ids = self._tokenizer.tokenize(texts)
    return tf.cast(ids, tf.int32)


def make_tokenizer(vocab_path: Optional[str] = None,
                   spm_model_path: Optional[str] = None,
                   lower_case: bool = True) -> Tokenizer:
  """Builds the tokenizer for exactly one of `vocab_path` / `spm_model_path`."""
  if bool(vocab_path) == bool(spm_model_path):
    raise ValueError("Give exactly one of vocab_path (WordPiece vocab.txt) and "
                     "spm_model_path (SentencePiece .model); got "
                     f"vocab_path={vocab_path!r}, "
                     f"spm_model_path={spm_model_path!r}")
  if vocab_path:
    return WordPieceTokenizer(vocab_path, lower_case=lower_case)
  return SentencePieceTokenizer(spm_model_path, lower_case=lower_case)


def write_vocab(path: str, tokens: Sequence[str]) -> None:
  """Writes a `vocab.txt` (used by the synthetic data and by tests)."""
  if len(set(tokens)) != len(tokens):
    raise ValueError("duplicate tokens in vocabulary")
  with tf.io.gfile.GFile(path, "w") as f:
    f.write("".join(t + "\n" for t in tokens))
