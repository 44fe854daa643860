"""Tests for tasks.common.tokenization: sentence splitting, WordPiece, SP."""

import pytest
import tensorflow as tf

from tasks.common import tokenization
from tokenization_testing import train_sentencepiece
from tokenization_testing import write_test_vocab


def test_split_sentences_keeps_initials_and_drops_empty():
  docs = tf.constant([
      "Tolkien wrote it. J. R. R. Tolkien was born in the U.S. in 1892! "
      "Was he?  yes.  ",
      "no end mark",
      "   ",
  ])
  got = tokenization.split_sentences(docs).to_list()
  assert got == [
      [b"Tolkien wrote it.",
       b"J. R. R. Tolkien was born in the U.S. in 1892!", b"Was he?",
       b"yes."],
      [b"no end mark"],
      [],
  ]


def test_wordpiece_tokenizes_uncased_with_pieces(tmp_path):
  vocab = write_test_vocab(tmp_path / "vocab.txt",
                           ["new", "york", "city", "##s", "cafe"])
  tok = tokenization.make_tokenizer(vocab_path=vocab)
  assert tok.kind == tokenization.WORDPIECE
  ids = tok.tokenize(tf.constant(["New Yorks, CAFÉ.", "zzz", ""]))
  v = tok.vocab
  assert ids.to_list() == [
      [v.index("new"), v.index("york"), v.index("##s"), v.index(","),
       v.index("cafe"), v.index(".")],
      [v.index("[UNK]")],
      [],
  ]
  assert tok.vocab_size == len(v)


def test_sentencepiece_tokenizer_matches_sentencepiece_library(tmp_path):
  spm = pytest.importorskip("sentencepiece")
  texts = [f"the city number {i} lies in the country of avalon." for i in
           range(200)] + ["Berlin and Paris are cities."] * 20
  path = train_sentencepiece(tmp_path / "sp.model", texts)
  tok = tokenization.make_tokenizer(spm_model_path=path)
  assert tok.kind == tokenization.SENTENCEPIECE
  reference = spm.SentencePieceProcessor(model_file=path)
  text = "Berlin lies in the COUNTRY of Avalon."
  assert tok.tokenize_py(text) == reference.encode(text.lower())


def test_make_tokenizer_needs_exactly_one_vocabulary(tmp_path):
  with pytest.raises(ValueError, match="exactly one"):
    tokenization.make_tokenizer()
  with pytest.raises(ValueError, match="empty vocabulary"):
    (tmp_path / "empty.txt").write_text("")
    tokenization.make_tokenizer(vocab_path=str(tmp_path / "empty.txt"))
