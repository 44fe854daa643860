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
# SentencePiece's word-boundary mark.
_SPIECE_UNDERLINE = "\u2581"
# Python's `str.isdigit` (the original's digit test) as an RE2 class: decimal
# digits (Nd) and the other characters of numeric type Digit (superscripts,
# subscripts, circled digits, ...; Unicode 14).
_DIGIT = (r"[\p{Nd}\x{B2}-\x{B3}\x{B9}\x{1369}-\x{1371}\x{19DA}\x{2070}"
          r"\x{2074}-\x{2079}\x{2080}-\x{2089}\x{2460}-\x{2468}"
          r"\x{2474}-\x{247C}\x{2488}-\x{2490}\x{24EA}\x{24F5}-\x{24FD}"
          r"\x{24FF}\x{2776}-\x{277E}\x{2780}-\x{2788}\x{278A}-\x{2792}"
          r"\x{10A40}-\x{10A43}\x{10E60}-\x{10E68}\x{11052}-\x{1105A}"
          r"\x{1F100}-\x{1F10A}]")

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


def _not_a_directory(path: str, what: str) -> None:
  """Raises UserInputError when `path`, given as a file, is a folder (e.g.
  a released checkpoint's folder instead of the vocabulary in it)."""
  if tf.io.gfile.isdir(path):
    raise UserInputError(f"{path}: is a directory, not a {what}")


def read_vocab(vocab_path: str) -> List[str]:
  """Reads a BERT `vocab.txt` (one token per line, id = line number).

  Raises:
    FileNotFoundError: no such file.
    UserInputError: the file is empty or lists a token twice (the
      tokenizer needs unique tokens); the message names the file and lines.
  """
  if not tf.io.gfile.exists(vocab_path):
    raise FileNotFoundError(f"{vocab_path}: vocabulary file not found")
  _not_a_directory(vocab_path, "vocabulary file (vocab.txt)")
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


# BERT's BasicTokenizer, as regular expressions (RE2 syntax). Whitespace is
# space, tab, newline, carriage return and Unicode Zs, nothing else: other
# control characters (form feed, U+0085) are removed, not split on, and line
# separators (Zl, Zp) stay inside a word, as BERT's `_is_whitespace` says.
_WHITESPACE = r"[ \t\n\r\p{Zs}]"
# Punctuation: every non-alphanumeric printable ASCII character, and Unicode P*.
_PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"
# The CJK ideograph blocks of BERT's `_is_chinese_char`: each is its own word.
_CJK = (r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}"
        r"\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}"
        r"\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]")
_KEPT_DELIMITERS = f"{_PUNCTUATION}|{_CJK}"
_DELIMITERS = f"{_WHITESPACE}+|{_KEPT_DELIMITERS}"
# Removed characters: NUL, U+FFFD and control/format characters (Cc, Cf);
# tab, newline and carriage return never reach this (they are whitespace).
_REMOVED = r"[\x{0}\x{FFFD}\p{Cc}\p{Cf}]"
# The original ETC code's WordpieceTokenizer gives one [UNK] for a word of
# more than 200 characters.
MAX_CHARS_PER_WORD = 200


def _split_words(texts: tf.Tensor) -> Tuple[tf.RaggedTensor, tf.Tensor,
                                            tf.Tensor]:
  """BERT's word split: <string>[N] -> words [N, (w)], int32 offsets [w]."""
  # The split op ends a string at a NUL byte; NUL is removed later anyway, so
  # it becomes another removed character of the same length (offsets hold).
  texts = tf.strings.regex_replace(texts, r"\x00", "\x01")
  words, starts, ends = tf_text.regex_split_with_offsets(
      texts, _DELIMITERS, _KEPT_DELIMITERS)
  return (words, tf.cast(starts.flat_values, tf.int32),
          tf.cast(ends.flat_values, tf.int32))


class WordPieceTokenizer(Tokenizer):
  """BERT WordPiece tokenization from a `vocab.txt`, as BERT's FullTokenizer.

  Text is normalized exactly as BERT's `BasicTokenizer` (and so the original
  ETC code) does it: NUL, U+FFFD and control/format characters removed; split
  on whitespace, punctuation and CJK ideographs; for an uncased vocabulary,
  each word lower-cased, decomposed (NFD) and stripped of its combining marks
  (Mn), nothing more. tensorflow-text's own BERT normalization
  (`lower_case_nfd_strip_accents`, `BertTokenizer(lower_case=True)`)
  case-folds with NFKC, which also folds compatibility characters (`km²` ->
  `km2`, `ß` -> `ss`, `ﬁ` -> `fi`, full-width letters -> ASCII) and so gives
  other ids than the checkpoints were trained on: the normalization is written
  here with regex and `normalize_utf8` ops, and only the WordPiece step is
  tensorflow-text's (`FastWordpieceTokenizer`).

  Offsets are byte offsets into the raw text. Where normalization changes a
  word's byte length (accents, ligatures), each of its pieces spans the whole
  raw word.
  """

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
    self._unknown_token = unknown_token
    # The fast tokenizer serializes its model into a constant: nothing to
    # track for a SavedModel, no lookup table to initialize. Words arrive
    # split and normalized; the byte limit only has to admit
    # MAX_CHARS_PER_WORD characters (the character limit is applied here).
    self._wordpiece = tf_text.FastWordpieceTokenizer(
        vocab=self._vocab, token_out_type=tf.int32,
        unknown_token=unknown_token, no_pretokenization=True,
        max_bytes_per_word=4 * MAX_CHARS_PER_WORD)

  @property
  def vocab(self) -> List[str]:
    return list(self._vocab)

  @property
  def vocab_size(self) -> int:
    return len(self._vocab)

  def token_id(self, token: str) -> Optional[int]:
    return self._ids.get(token)

  def normalize(self, words: tf.Tensor) -> tf.Tensor:
    """BERT's per-word normalization: <string>[...] -> same shape."""
    words = tf.strings.regex_replace(words, _REMOVED, "")
    if self.lower_case:
      words = tf.strings.lower(words, encoding="utf-8")
      words = tf_text.normalize_utf8(words, "NFD")
      words = tf.strings.regex_replace(words, r"\p{Mn}", "")
    return words

  def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    return self.tokenize_with_offsets(texts)[0]

  def tokenize_with_offsets(self, texts: tf.Tensor):
    texts = tf.convert_to_tensor(texts, tf.string)
    # 1. Raw words and their offsets into the text.
    raw, raw_starts, raw_ends = _split_words(texts)  # [N, (r)]
    normalized = self.normalize(raw.flat_values)  # [r]
    same_length = tf.equal(tf.strings.length(normalized),
                           raw_ends - raw_starts)
    # 2. BERT splits punctuation after normalizing, so split again: a
    # character that only then becomes punctuation (U+1FEF -> "`") splits the
    # word, and words of removed characters or marks only vanish.
    words, word_starts, word_ends = _split_words(normalized)  # [r, (w)]
    # 3. WordPiece; a word of too many characters is one [UNK] (the unknown
    # token's own text tokenizes to its id).
    too_long = (tf.strings.length(words.flat_values, unit="UTF8_CHAR") >
                MAX_CHARS_PER_WORD)
    pieces, piece_starts, piece_ends = self._wordpiece.tokenize_with_offsets(
        tf.where(too_long, self._unknown_token, words.flat_values))
    piece_word = tf.cast(pieces.value_rowids(), tf.int32)  # [p]
    # Offsets: piece -> its word in the normalized raw word -> the raw text.
    word_start = tf.gather(word_starts, piece_word)
    word_end = tf.gather(word_ends, piece_word)
    long_piece = tf.gather(too_long, piece_word)
    starts = tf.where(long_piece, word_start,
                      word_start + tf.cast(piece_starts.flat_values, tf.int32))
    ends = tf.where(long_piece, word_end,
                    word_start + tf.cast(piece_ends.flat_values, tf.int32))
    piece_raw = tf.gather(tf.cast(words.value_rowids(), tf.int32), piece_word)
    same = tf.gather(same_length, piece_raw)
    raw_start = tf.gather(raw_starts, piece_raw)
    starts = tf.where(same, raw_start + starts, raw_start)
    ends = tf.where(same, raw_start + ends, tf.gather(raw_ends, piece_raw))
    # Regroup the pieces by input text.
    piece_text = tf.gather(tf.cast(raw.value_rowids(), tf.int32), piece_raw)
    nrows = tf.cast(raw.nrows(), tf.int32)

    def by_text(values):
      return tf.RaggedTensor.from_value_rowids(values, piece_text, nrows)

    return (by_text(tf.cast(pieces.flat_values, tf.int32)), by_text(starts),
            by_text(ends))


class SentencePieceTokenizer(Tokenizer):
  """SentencePiece tokenization from a `.model` file, as the original ETC's
  ALBERT-style tokenizer.

  The model's own normalizer (NFKC and whatever it was trained with) is the
  only normalization: the original does not lower-case for a SentencePiece
  vocabulary. As the original's `encode_pieces`, a piece that ends in a comma
  right after a digit ("▁1990,") is encoded again without the comma and its
  word-boundary marks, and the comma appended as its own piece. The original
  meant to drop the boundary mark that re-encoding puts before a piece from
  inside a word, but under Python 3 its check compares text with bytes and
  never holds: the mark stays ("10,5" -> "▁", "▁10", ",", "5"). That is how
  the released checkpoints' data was made, so it is kept.
  """

  kind = SENTENCEPIECE

  def __init__(self, model_path: str, lower_case: bool = False):
    """Loads the model.

    Args:
      model_path: the `.model` file.
      lower_case: lower-case the text first (not the original's behaviour;
        for a model trained on lower-cased text without a case-folding
        normalizer).
    """
    super().__init__(name="sentencepiece_tokenizer")
    if not tf.io.gfile.exists(model_path):
      raise FileNotFoundError(f"{model_path}: SentencePiece model file not "
                              f"found")
    _not_a_directory(model_path, "SentencePiece model file (.model)")
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
    return self.tokenize_with_offsets(texts)[0]

  def tokenize_with_offsets(self, texts: tf.Tensor):
    ids, starts, ends = _flat_int32(
        *self._tokenizer.tokenize_with_offsets(self._normalized(texts)))
    return self._split_digit_commas(ids, starts, ends)

  def _split_digit_commas(self, ids: tf.RaggedTensor, starts: tf.RaggedTensor,
                          ends: tf.RaggedTensor):
    """The original's digit-comma rule, on [N, (p)] ids and offsets."""
    i32 = tf.int32
    flat = ids.flat_values  # [P]
    pieces = self._tokenizer.id_to_string(flat)
    split = tf.strings.regex_full_match(pieces, f"(?s).*{_DIGIT},")
    split_at = tf.cast(tf.where(split)[:, 0], i32)  # [K]
    split_pieces = tf.gather(pieces, split_at)
    # The piece without its comma and word-boundary marks, encoded again.
    bare = tf.strings.regex_replace(
        tf.strings.regex_replace(split_pieces, ",$", ""), _SPIECE_UNDERLINE,
        "")
    comma = tf.fill([tf.size(split_at), 1], self._tokenizer.string_to_id(","))
    replacement_ids = tf.concat(
        [tf.cast(self._tokenizer.tokenize(bare), i32), comma],
        axis=1)  # [K, (s + 1)]
    # Every piece -> its pieces: [id], or its replacement; merged in order.
    keep_at = tf.cast(tf.where(~split)[:, 0], i32)
    piece_of = tf.concat([
        keep_at, tf.gather(split_at, tf.cast(replacement_ids.value_rowids(),
                                             i32))], axis=0)
    order = tf.argsort(piece_of, stable=True)
    new_ids = tf.gather(tf.concat(
        [tf.gather(flat, keep_at),
         tf.cast(replacement_ids.flat_values, i32)], axis=0), order)
    new_piece = tf.gather(piece_of, order)
    row = tf.gather(tf.cast(ids.value_rowids(), i32), new_piece)
    nrows = tf.cast(ids.nrows(), i32)
    new_starts = tf.gather(starts.flat_values, new_piece)
    new_ends = tf.gather(ends.flat_values, new_piece)

    def by_text(values):
      return tf.RaggedTensor.from_value_rowids(values, row, nrows)

    return by_text(new_ids), by_text(new_starts), by_text(new_ends)

  def token_id(self, token: str) -> Optional[int]:
    ids = self._tokenizer.string_to_id(tf.constant([token, "<unk>"]))
    token_id, unk = (int(i) for i in ids.numpy())
    return None if token_id == unk and token != "<unk>" else token_id


def make_tokenizer(vocab_path: Optional[str] = None,
                   spm_model_path: Optional[str] = None,
                   lower_case: bool = True) -> Tokenizer:
  """Builds the tokenizer for exactly one of `vocab_path` / `spm_model_path`.

  `lower_case` is the WordPiece vocabulary's casing; a SentencePiece model
  normalizes as it was trained (the original's behaviour).
  """
  if bool(vocab_path) == bool(spm_model_path):
    raise UserInputError(
        "Give exactly one of vocab_path (WordPiece vocab.txt) and "
        "spm_model_path (SentencePiece .model); got "
        f"vocab_path={vocab_path!r}, "
        f"spm_model_path={spm_model_path!r}")
  if vocab_path:
    return WordPieceTokenizer(vocab_path, lower_case=lower_case)
  return SentencePieceTokenizer(spm_model_path)


def write_vocab(path: str, tokens: Sequence[str]) -> None:
  """Writes a `vocab.txt` (used by the synthetic data and by tests)."""
  if len(set(tokens)) != len(tokens):
    raise UserInputError("duplicate tokens in vocabulary")
  with tf.io.gfile.GFile(path, "w") as f:
    f.write("".join(t + "\n" for t in tokens))
