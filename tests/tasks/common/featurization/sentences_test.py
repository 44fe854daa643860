"""Tests for tasks.common.featurization.sentences: Punkt as
`nltk.sent_tokenize`."""

import json
import os

from tasks.common.featurization import sentences

ORIGINAL = os.path.join(os.path.dirname(__file__), "..", "..", "..", "data",
                        "original_etc")


def test_split_equals_nltk_sent_tokenize_on_the_golden_texts():
  # `sentences.jsonl`: WikiHop-style supports and hard cases with the
  # sentences `nltk.sent_tokenize` (NLTK's own English punkt_tab) gave.
  with open(os.path.join(ORIGINAL, "sentences.jsonl"),
            encoding="utf-8") as f:
    goldens = [json.loads(line) for line in f]
  assert len(goldens) > 50
  for golden in goldens:
    assert sentences.split_sentences(golden["text"]) == golden[
        "sentences"], repr(golden["text"])


def test_abbreviations_and_spaced_punctuation():
  assert sentences.split_sentences(
      "Martin Luther King Jr. was born in Atlanta . The St. Louis Cardinals "
      "( a U.S. team ) won !") == [
          "Martin Luther King Jr. was born in Atlanta .",
          "The St. Louis Cardinals ( a U.S. team ) won !"]


def test_split_documents_counts_sentences_per_document():
  assert sentences.split_documents(["One. Two.", "", "   ", "Three"]) == (
      ["One.", "Two.", "Three"], [2, 0, 0, 1])
