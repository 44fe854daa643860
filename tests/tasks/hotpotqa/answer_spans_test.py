"""Tests for tasks.hotpotqa.answer_spans: answers located in the text as
the original locates them."""

from tasks.hotpotqa import answer_spans


def test_answer_spans_are_located_as_the_original():
  # WordPiece: an occurrence widens to its whitespace words, then narrows to
  # the answer's own pieces if they are there.
  text = "born (1895-1943) in Japanese, ok"
  starts = [0, 5, 6, 10, 11, 15, 17, 20, 28, 30]  # born ( 1895 - 1943 ) ...
  ids = list(range(10, 20))
  assert answer_spans.wordpiece_answer_spans(text, "1895", ids, starts,
                                             [12]) == [(2, 2)]
  # "Japan" has other pieces than "japanese": the whole word "Japanese,".
  assert answer_spans.wordpiece_answer_spans(text, "Japan", ids, starts,
                                             [99]) == [(7, 8)]
  assert answer_spans.wordpiece_answer_spans(text, "Rome", ids, starts,
                                             [99]) == []
  # SentencePiece: searched in the text the pieces spell.
  pieces = ["\u2581Km", "2", "\u2581is", "\u2581Km", "2"]
  assert answer_spans.sentencepiece_answer_spans(pieces, "Km2") == [(0, 1),
                                                                    (3, 4)]
  assert answer_spans.sentencepiece_answer_spans(pieces, "Km\u00b2") == []
