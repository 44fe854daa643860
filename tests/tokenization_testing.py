"""Vocabularies for tests: a BERT-style vocab.txt from a word list, and a
tiny SentencePiece model trained on the fly (skipped without the
`sentencepiece` package)."""

import io
import os

import pytest

from tasks.common.featurization import tokenization

BASE_WORDS = (
    ["[PAD]"] + [f"[unused{i}]" for i in range(10)] +
    ["[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "_", "'"])


def write_test_vocab(path, words) -> str:
  """A BERT-style vocab.txt: [PAD]=0, [unused0..9]=1..10, [UNK]=11, ...,
  then `words`; returns its path."""
  tokens = list(BASE_WORDS) + [w for w in words if w not in BASE_WORDS]
  tokenization.write_vocab(os.fspath(path), tokens)
  return os.fspath(path)


def train_sentencepiece(path, texts, vocab_size=120) -> str:
  """Trains a tiny SentencePiece model on `texts`; returns the .model path."""
  spm = pytest.importorskip("sentencepiece")
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(texts), model_writer=model,
      vocab_size=vocab_size, model_type="unigram", character_coverage=1.0,
      hard_vocab_limit=False, minloglevel=2, num_threads=1)
  with open(path, "wb") as f:
    f.write(model.getvalue())
  return os.fspath(path)
