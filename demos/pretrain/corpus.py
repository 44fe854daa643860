"""The pre-training demo's corpus: the Python documentation topics that ship
with every CPython (`pydoc_data.topics.topics`, ~465 KB of English prose
about the language; PSF License, as CPython), as documents in BERT's
plain-text layout, and a WordPiece vocabulary learned from them.

From each of the 79 topics: the text is cut into documents at its section
headings (a line underlined with `=`, `-`, `*` or `~`); within a document,
paragraphs (blocks between blank lines) that are not prose are dropped --
code (`>>>` / `...` prompts), grammar productions (`::=`), signatures and
other lines without a sentence end, lists of keywords (fewer than 70% word
tokens) -- and the rest is split into sentences by
`tasks.common.featurization.tokenization.split_sentences` (the splitter of the TFDS
reader). The documents are written one sentence per line, a blank line
between them, which is what `tasks.pretrain.data` reads.

The vocabulary is learned by `tensorflow_text`'s
`bert_vocab_from_dataset` (BERT's basic tokenizer, lower-cased) from the
same text, with the reserved entries [PAD] (0), [unused0] (1: the id of
the sentence summary tokens, as in BERT's vocabulary where the original
ETC's id 1 is also an unused entry), [UNK], [CLS], [SEP], [MASK].
"""

import os
import re
from typing import Dict, Iterator, List, Optional, Tuple

import pydoc_data.topics
import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

from tasks.common.featurization import tokenization

SOURCE = ("pydoc_data.topics (the Python documentation topics shipped with "
          "CPython; PSF License)")
RESERVED_TOKENS = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_HEADING_RULE = re.compile(r"([=\-*~])\1{2,}")
_WORD = re.compile(r"[\"\u201c(*]*[A-Za-z][A-Za-z\u2019'\-]*"
                   r"[\"\u201d)*.,;:!?]*")
_SENTENCE_END = re.compile(r"[.!?:]$|[.!?] ")


def sections(text: str) -> Iterator[Tuple[str, List[str]]]:
  """(heading, lines) of each section of a topic."""
  lines = text.split("\n")
  title, current = "", []
  i = 0
  while i < len(lines):
    if (i + 1 < len(lines) and lines[i].strip() and
        not lines[i].startswith(" ") and
        _HEADING_RULE.fullmatch(lines[i + 1].strip())):
      if current:
        yield title, current
      title, current = lines[i].strip(), []
      i += 2
      continue
    current.append(lines[i])
    i += 1
  if current:
    yield title, current


def paragraphs(lines: List[str]) -> Iterator[List[str]]:
  block: List[str] = []
  for line in lines + [""]:
    if line.strip():
      block.append(line)
    elif block:
      yield block
      block = []


def is_prose(block: List[str]) -> bool:
  """Whether a paragraph is prose (see the module docstring)."""
  text = " ".join(line.strip() for line in block)
  if "::=" in text or any(line.strip().startswith((">>>", "..."))
                          for line in block):
    return False
  words = text.split()
  if len(words) < 4:
    return False
  if sum(bool(_WORD.fullmatch(w)) for w in words) < 0.7 * len(words):
    return False
  return bool(_SENTENCE_END.search(text))


def documents() -> List[Tuple[str, List[str]]]:
  """(name, sentences) of every section with prose, in topic order."""
  names, texts = [], []
  for topic, text in sorted(pydoc_data.topics.topics.items()):
    for title, lines in sections(text):
      prose = [" ".join(line.strip() for line in block)
               for block in paragraphs(lines) if is_prose(block)]
      if prose:
        names.append(f"{topic}/{title}")
        texts.append("\n".join(prose))
  out = []
  # Sentences per paragraph, in the graph (one call for all).
  split = tokenization.split_sentences(tf.strings.split(
      tf.constant(texts), "\n").flat_values)
  per_text = [len(t.split("\n")) for t in texts]
  rows = split.to_list()
  start = 0
  for name, count in zip(names, per_text):
    sentences = [s.decode("utf-8") for row in rows[start:start + count]
                 for s in row]
    start += count
    out.append((name, sentences))
  return out


def write_corpus(path: str, max_documents: Optional[int] = None
                 ) -> Dict[str, int]:
  """Writes the corpus (its first `max_documents` documents) in BERT's
  layout; returns its counts."""
  docs = documents()[:max_documents]
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n\n".join("\n".join(sentences) for _, sentences in docs))
    f.write("\n")
  return {"documents": len(docs),
          "sentences": sum(len(s) for _, s in docs),
          "characters": sum(len(x) for _, s in docs for x in s)}


def build_vocab(corpus_path: str, vocab_path: str,
                vocab_size: int = 4000) -> int:
  """Learns a WordPiece vocab.txt from the corpus; returns its size."""
  with open(corpus_path, encoding="utf-8") as f:
    lines = [line for line in f.read().split("\n") if line.strip()]
  dataset = tf.data.Dataset.from_tensor_slices(lines).batch(1000)
  vocab = bert_vocab_from_dataset.bert_vocab_from_dataset(
      dataset, vocab_size=vocab_size, reserved_tokens=RESERVED_TOKENS,
      bert_tokenizer_params={"lower_case": True},
      # Pieces seen twice count: the default (10) leaves ~1,000 pieces of
      # this small corpus, most words split into several.
      learn_params={"lower_thresh": 2})
  tokenization.write_vocab(vocab_path, vocab)
  return len(vocab)
