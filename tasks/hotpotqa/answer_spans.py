"""Where a HotpotQA answer lies in the featurized text, found as the original.

`AnswerLocator` finds an answer's occurrences in a title or sentence the way
the original ETC HotpotQA preprocessing does, per vocabulary kind:
WordPiece widens an occurrence to the whitespace words it touches and then
to the wordpieces whose text matches best (`wordpiece_answer_spans`);
SentencePiece matches the pieces' text (`sentencepiece_answer_spans`).
`features.add_labels` turns the occurrences into span and BIO labels.
"""

from typing import List, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from tasks.common.featurization import tokenization


# The original's whitespace for its word split of a text ("unigrams"): a
# WordPiece answer span is widened to whole words of this split.
_UNIGRAM_DELIMITERS = " \t\r\n\u202f"


def _char_spans(text: str, answer: str) -> List[Tuple[int, int]]:
  """Inclusive character spans of the non-overlapping occurrences of
  `answer` in `text`, left to right (the original's `find_char_spans`)."""
  spans = []
  at = text.find(answer) if answer else -1
  while at != -1:
    spans.append((at, at + len(answer) - 1))
    at = text.find(answer, at + len(answer))
  return spans


def _char_unigrams(text: str) -> List[int]:
  """Per character, the index of its whitespace word; a delimiter belongs to
  the word before it, and leading delimiters to word -1 (the original's
  `whitespace_split_with_indices`)."""
  out, word, separated = [], -1, True
  for c in text:
    if c in _UNIGRAM_DELIMITERS:
      separated = True
    else:
      if separated:
        word += 1
      separated = False
    out.append(word)
  return out


def _improve_span(token_ids: Sequence[int], begin: int, end: int,
                  answer_ids: Sequence[int]) -> Tuple[int, int]:
  """The first sub-span of [begin, end] whose pieces are the answer's
  pieces, else [begin, end] (BERT's `_improve_answer_span`)."""
  answer_ids = list(answer_ids)
  for new_begin in range(begin, end + 1):
    for new_end in range(end, new_begin - 1, -1):
      if list(token_ids[new_begin:new_end + 1]) == answer_ids:
        return new_begin, new_end
  return begin, end


def wordpiece_answer_spans(text: str, answer: str,
                           token_ids: Sequence[int],
                           token_starts: Sequence[int],
                           answer_ids: Sequence[int]
                           ) -> List[Tuple[int, int]]:
  """Inclusive piece spans of the answer in one text, as the original's
  `find_answer_spans_wordpiece`.

  Each occurrence of `answer` in the raw `text` is widened to the whitespace
  words it touches, then narrowed to the first run of pieces equal to the
  answer's own pieces (`answer_ids`) if there is one: "Japan" in
  "Japanese," stays `japanese ,`.

  Args:
    text: the title or sentence.
    answer: the gold answer.
    token_ids: the text's piece ids.
    token_starts: their start byte offsets in `text` (UTF-8).
    answer_ids: the answer's piece ids.
  """
  token_ids = [int(t) for t in token_ids]
  if not token_ids:
    return []
  char_unigram = _char_unigrams(text)
  char_bytes = np.cumsum([0] + [len(c.encode("utf-8")) for c in text])
  # Piece -> its word, through the character holding its first byte.
  chars = np.searchsorted(char_bytes, np.asarray(token_starts),
                          side="right") - 1
  token_unigram = [char_unigram[int(c)] for c in chars]
  num_unigrams = char_unigram[-1] + 1 if char_unigram else 0
  unigram_token = [int(np.searchsorted(token_unigram, u))
                   for u in range(num_unigrams)]
  spans = []
  for begin_char, end_char in _char_spans(text, answer):
    begin_word, end_word = char_unigram[begin_char], char_unigram[end_char]
    if begin_word < 0 or end_word < 0:
      continue  # in leading whitespace: no word holds it
    begin = unigram_token[begin_word]
    end = (unigram_token[end_word + 1] - 1
           if end_word + 1 < num_unigrams else len(token_ids) - 1)
    if end >= begin:  # else words without pieces
      spans.append(_improve_span(token_ids, begin, end, answer_ids))
  return spans


def sentencepiece_answer_spans(pieces: Sequence[str],
                               answer: str) -> List[Tuple[int, int]]:
  """Inclusive piece spans of the answer in one text, as the original's
  `find_answer_spans_sentencepiece`: occurrences are found in the text the
  pieces spell (normalized by the model, e.g. NFKC: "km²" is "km2" there),
  with "▁" as a space and the first piece's leading "▁" dropped."""
  underline = "\u2581"
  char_token = []
  for i, piece in enumerate(pieces):
    char_token.extend([i] * (len(piece) - (1 if i == 0 else 0)))
  pieces = list(pieces)
  if pieces and pieces[0].startswith(underline):
    pieces[0] = pieces[0][1:]
  text = "".join(pieces).replace(underline, " ")
  return [(char_token[b], char_token[e]) for b, e in _char_spans(text, answer)
          if e < len(char_token)]


class AnswerLocator:
  """Finds answer spans in a featurized text as the original does, for the
  tokenizer's kind (`wordpiece_answer_spans` / `sentencepiece_answer_spans`).

  A plain object (not a `tf.Module`), so that a featurizer holding one does
  not export it.
  """

  def __init__(self, tokenizer: tokenization.Tokenizer):
    self.tokenizer = tokenizer
    self._answer_ids = (None, [])
    # SentencePiece with string output, built when first needed.
    self._string_tokenizer = None
    self._unknown_id = None

  def _wordpiece_answer_ids(self, answer: str) -> List[int]:
    """The answer's pieces (the last answer's are kept: a record's texts
    are looked up one after the other)."""
    if self._answer_ids[0] != answer:
      self._answer_ids = (answer, self.tokenizer.tokenize_py(answer))
    return self._answer_ids[1]

  def _surface_pieces(self, text: str, token_ids: Sequence[int]) -> List[str]:
    """The pieces the original's tokenizer gives `text` (whose ids are
    `token_ids`): each id's piece, and for an unknown piece the characters
    it stands for (the model's string output; "<unk>" would shift the
    text the answer is searched in)."""
    if self._string_tokenizer is None:
      with tf.io.gfile.GFile(self.tokenizer.model_path, "rb") as f:
        self._string_tokenizer = tf_text.SentencepieceTokenizer(
            model=f.read(), out_type=tf.string)
      self._unknown_id = self.tokenizer.token_id("<unk>")
    sp = self._string_tokenizer
    pieces = [p.decode("utf-8") for p in
              sp.id_to_string(tf.constant(list(token_ids), tf.int32)).numpy()]
    unknown = [i for i, t in enumerate(token_ids) if t == self._unknown_id]
    if unknown:
      if getattr(self.tokenizer, "lower_case", False):
        text = text.lower()
      surfaces = sp.tokenize(tf.constant([text]))[0]
      # Unknown pieces are never re-encoded by the digit-comma rule: the
      # n-th unknown id is the n-th unknown piece.
      unknown_surfaces = tf.boolean_mask(
          surfaces, tf.equal(sp.string_to_id(surfaces), self._unknown_id))
      for i, surface in zip(unknown, unknown_surfaces.numpy()):
        pieces[i] = surface.decode("utf-8")
    return pieces

  def spans(self, text: str, answer: str, token_ids: Sequence[int],
            token_starts: Sequence[int]) -> List[Tuple[int, int]]:
    """Inclusive spans, relative to the text's first piece."""
    if self.tokenizer.kind == tokenization.SENTENCEPIECE:
      if not len(token_ids):  # pylint: disable=g-explicit-length-test
        return []
      return sentencepiece_answer_spans(
          self._surface_pieces(text, token_ids), answer)
    return wordpiece_answer_spans(text, answer, token_ids, token_starts,
                                  self._wordpiece_answer_ids(answer))
