"""Tests for tasks.common.featurization.tokenization: sentence splitting,
WordPiece, SP."""

import json
import os

import pytest
import tensorflow as tf

import cli_testing
from etc_realformer.errors import UserInputError
from tasks.common.featurization import tokenization
from tokenization_testing import train_sentencepiece
from tokenization_testing import write_test_vocab

ORIGINAL = os.path.join(os.path.dirname(__file__), "..", "..", "..", "data",
                        "original_etc")


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


def test_wordpiece_normalizes_as_bert_not_nfkc(tmp_path):
  # BERT lower-cases, decomposes (NFD) and drops combining marks only:
  # compatibility characters stay what they are.
  vocab = write_test_vocab(tmp_path / "vocab.txt", [
      "km", "##²", "stra", "##ße", "ﬁ", "##nal", "cafe", "zurich", "world",
      "war", "ii", "city", "(", ")", "中", "文", "ｔｏｋｙｏ"])
  tok = tokenization.make_tokenizer(vocab_path=vocab)
  v = tok.vocab

  def pieces(text):
    return [v[i] for i in tok.tokenize_py(text)]

  assert pieces("km² Straße ﬁnal") == ["km", "##²", "stra", "##ße", "ﬁ",
                                       "##nal"]
  # Full-width letters are lower-cased but not folded to ASCII.
  assert pieces("ＴＯＫＹＯ Tokyo") == ["ｔｏｋｙｏ", "[UNK]"]
  assert pieces("CAFÉ Zürich") == ["cafe", "zurich"]
  # Zs (no-break space) splits; control and format characters vanish (a
  # zero-width space joins its neighbours); NUL and U+FFFD too.
  assert pieces("World\u00a0War\tII") == ["world", "war", "ii"]
  assert pieces("ci\u200bty c\x00it\ufffdy\x0c") == ["city", "city"]
  # CJK ideographs are words of their own; punctuation splits.
  assert pieces("中文(city)") == ["中", "文", "(", "city", ")"]
  # A word of over 200 characters is one [UNK] (the original's limit).
  assert pieces("a" * 201 + " city") == ["[UNK]", "city"]
  assert pieces("\u0301 \x01") == []


def test_wordpiece_cased_vocabulary_keeps_case_and_accents(tmp_path):
  vocab = write_test_vocab(tmp_path / "vocab.txt",
                           ["Café", "cafe", "Z", "##ürich"])
  tok = tokenization.WordPieceTokenizer(vocab, lower_case=False)
  v = tok.vocab
  assert [v[i] for i in tok.tokenize_py("Café Zürich")] == [
      "Café", "Z", "##ürich"]


def test_wordpiece_offsets_point_into_the_raw_text(tmp_path):
  vocab = write_test_vocab(tmp_path / "vocab.txt",
                           ["new", "york", "##s", "cafe"])
  tok = tokenization.make_tokenizer(vocab_path=vocab)
  text = "New  Yorks, CAFÉs."
  ids, starts, ends = tok.tokenize_with_offsets(tf.constant([text]))
  raw = text.encode("utf-8")
  spans = [raw[a:b].decode("utf-8")
           for a, b in zip(starts[0].numpy(), ends[0].numpy())]
  # ASCII words map piece by piece; a word whose normalization changed its
  # length ("CAFÉs" -> "cafes") gives each piece the whole raw word.
  assert spans == ["New", "York", "s", ",", "CAFÉs", "CAFÉs", "."]
  assert len(ids[0]) == len(spans)


def _original_encode(processor, text):
  """The original ETC's `encode_pieces` + PieceToId as it runs under Python
  3, restated: a piece ending in a comma after a digit is encoded again
  without the comma and its boundary marks (the re-encoding's leading mark
  is kept: the original's check for it compares text with bytes)."""
  mark = "\u2581"
  out = []
  for piece in processor.encode_as_pieces(text):
    if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
      sub = processor.encode_as_pieces(piece[:-1].replace(mark, ""))
      out.extend(sub + [","])
    else:
      out.append(piece)
  return [processor.piece_to_id(p) for p in out]


def test_sentencepiece_tokenizer_as_the_original(tmp_path):
  spm = pytest.importorskip("sentencepiece")
  texts = [f"In {1900 + i}, the city number {i} had {i},000, people." for i
           in range(200)] + ["Berlin and Paris are cities, 12, a."] * 20
  path = train_sentencepiece(tmp_path / "sp.model", texts)
  tok = tokenization.make_tokenizer(spm_model_path=path)
  assert tok.kind == tokenization.SENTENCEPIECE
  reference = spm.SentencePieceProcessor(model_file=path)
  for text in ["Berlin lies in the COUNTRY of Avalon.",
               "In 1990, the city had 12,000, people; x1,5, 7,", ""]:
    # No lower-casing: the model's own normalizer only, as the original.
    assert tok.tokenize_py(text) == _original_encode(reference, text), text


def test_make_tokenizer_needs_exactly_one_vocabulary(tmp_path):
  with pytest.raises(ValueError, match="exactly one"):
    tokenization.make_tokenizer()
  with pytest.raises(ValueError, match="empty vocabulary"):
    (tmp_path / "empty.txt").write_text("")
    tokenization.make_tokenizer(vocab_path=str(tmp_path / "empty.txt"))


def test_a_directory_given_as_the_vocabulary_is_one_line(tmp_path):
  folder = tmp_path / "released_checkpoint"
  folder.mkdir()
  with pytest.raises(UserInputError, match="is a directory, not a vocab"):
    tokenization.make_tokenizer(vocab_path=str(folder))
  with pytest.raises(UserInputError, match="is a directory, not a Sentence"):
    tokenization.make_tokenizer(spm_model_path=str(folder))
  data = tmp_path / "dev.json"
  data.write_text("[]")
  cli_testing.user_error_line_here(
      "tasks.wikihop.preprocess", [f"--input={data}", f"--vocab={folder}",
                                   f"--output_dir={tmp_path / 'out'}"],
      f"{folder}: is a directory, not a vocabulary file")


def _original_tokenization():
  """`tests/data/original_etc/tokenization.jsonl`: texts and the ids the
  original ETC tokenizers gave them (the folder's README says how)."""
  path = os.path.join(ORIGINAL, "tokenization.jsonl")
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


@pytest.mark.parametrize("kind", ["wordpiece", "wordpiece_cased",
                                  "sentencepiece"])
def test_ids_equal_the_original_tokenizers(kind):
  if kind == "sentencepiece":
    tok = tokenization.make_tokenizer(
        spm_model_path=os.path.join(ORIGINAL, "spm.model"))
  else:
    tok = tokenization.WordPieceTokenizer(
        os.path.join(ORIGINAL, "vocab.txt"),
        lower_case=kind == "wordpiece")
  goldens = _original_tokenization()
  if kind == "sentencepiece":
    # tensorflow-text bundles its own SentencePiece library, which breaks
    # ties between equal-scoring segmentations of long runs of one character
    # ("x" * 250) otherwise than the Python package the original used: those
    # texts differ before any of this project's code runs.
    spm = pytest.importorskip("sentencepiece")
    library = spm.SentencePieceProcessor(
        model_file=os.path.join(ORIGINAL, "spm.model"))
    bundled = tok._tokenizer.tokenize(  # pylint: disable=protected-access
        tf.constant([g["text"] for g in goldens])).to_list()
    goldens = [g for g, b in zip(goldens, bundled)
               if library.encode(g["text"]) == b]
    assert len(goldens) >= 60
  got = tok.tokenize(tf.constant([g["text"] for g in goldens])).to_list()
  for ids, golden in zip(got, goldens):
    assert ids == golden[kind], repr(golden["text"])


def test_digit_class_is_python_isdigit():
  # The digit-comma rule tests the piece's last-but-one character with
  # Python's `isdigit`: every numeric character (Nd, No, Nl) must be
  # classified as Python does.
  import unicodedata  # pylint: disable=g-import-not-at-top
  chars = [chr(c) for c in range(0x110000)
           if unicodedata.category(chr(c)) in ("Nd", "No", "Nl")]
  got = tf.strings.regex_full_match(
      tf.constant(chars), tokenization._DIGIT).numpy()  # pylint: disable=protected-access
  assert [c for c, g in zip(chars, got) if g != c.isdigit()] == []
