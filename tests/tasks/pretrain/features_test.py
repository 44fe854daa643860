"""Tests for tasks.pretrain.features: cutting documents into examples at
sentence boundaries, the stored features, and word starts for both
vocabulary kinds."""

import numpy as np
import pytest

from etc_realformer.errors import UserInputError
from tasks.pretrain import features
from tokenization_testing import train_sentencepiece
from tokenization_testing import write_test_vocab

WORDS = ["the", "cat", "sat", "on", "mat", "##s", "a", "dog", "ran"]


@pytest.fixture(scope="module")
def featurizer(tmp_path_factory):
  vocab = write_test_vocab(tmp_path_factory.mktemp("v") / "vocab.txt", WORDS)
  return features.PretrainFeaturizer(vocab_path=vocab, long_seq_len=12,
                                     global_seq_len=3, max_sentence_len=6)


def test_examples_cut_at_sentence_boundaries(featurizer):
  pieces = featurizer.tokenize(["The cats sat.", "A dog ran on the mat.",
                                "The cat sat on the mats, the cat ran.",
                                "", "A cat.", "Dog."])
  assert [len(p) for p in pieces] == [5, 7, 12, 0, 3, 2]
  examples, dropped = featurizer.examples(pieces)
  # 5 + 6 (cut from 7) fit L=12; the next 6 (cut from 12) + 3 + 2 fit too;
  # nothing is left for a short piece.
  assert dropped == dict(sentences_cut=2, tokens_cut=1 + 6, short_pieces=0,
                         short_piece_tokens=0)
  assert len(examples) == 2
  first = examples[0]
  assert set(first) == set(features.FEATURES)
  assert first["sentence_ids"].tolist() == [0] * 5 + [1] * 6 + [0]
  assert first["long_breakpoints"].tolist() == [0] * 10 + [1, 0]
  assert first["global_token_ids"].tolist() == [1, 1, 0]
  assert first["global_breakpoints"].tolist() == [0, 1, 0]
  # "the cat ##s sat ." -> "cats" is one word of two pieces.
  assert first["word_starts"][:5].tolist() == [1, 1, 0, 1, 1]
  assert first["word_starts"][5] == 1  # a sentence always starts a word
  assert features.sentence_lengths(first).tolist() == [5, 6]
  second = examples[1]
  assert features.sentence_lengths(second).tolist() == [6, 3, 2]
  # A tail of one sentence is dropped.
  examples, dropped = featurizer.examples(pieces[:3])
  assert len(examples) == 1
  assert dropped["short_pieces"] == 1 and dropped["short_piece_tokens"] == 6


def test_settings_are_checked(tmp_path):
  vocab = write_test_vocab(tmp_path / "vocab.txt", WORDS)
  for bad in (dict(long_seq_len=1), dict(max_sentence_len=40),
              dict(min_example_sentences=0)):
    args = dict(vocab_path=vocab, long_seq_len=12, global_seq_len=3)
    args.update(bad)
    with pytest.raises(UserInputError):
      features.PretrainFeaturizer(**args)


def test_sentencepiece_word_starts(tmp_path):
  texts = ["the cat sat on the mat", "a dog ran on the mats"] * 20
  model = train_sentencepiece(tmp_path / "sp.model", texts, vocab_size=40)
  featurizer = features.PretrainFeaturizer(spm_model_path=model,
                                           long_seq_len=32,
                                           global_seq_len=4)
  pieces = featurizer.tokenize(["the cats", "a dog"])
  example = featurizer.examples(pieces)[0][0]
  # Every piece starting with "\u2581" starts a word; others continue one.
  table = features.continuation_table(featurizer.tokenizer)
  n = sum(len(p) for p in pieces)
  ids = example["token_ids"][:n]
  expected = ~table[ids]
  expected[0] = expected[len(pieces[0])] = True
  np.testing.assert_array_equal(example["word_starts"][:n] > 0, expected)
