"""Pre-training features: the stored (unmasked) examples and the featurizer
that cuts documents into them.

An example is a piece of one document, cut at sentence boundaries:

  token_ids           <int32>[L]  the sentences' wordpieces, then 0
  word_starts         <int32>[L]  1 at the first piece of each word (whole-
                                  word masking; every sentence starts one)
  sentence_ids        <int32>[L]  the sentence (= global token) of each long
                                  token; 0 on padding
  long_breakpoints    <int32>[L]  1 at the last real long token
  global_token_ids    <int32>[G]  `global_token_id` (1, as the original) per
                                  sentence, then 0
  global_breakpoints  <int32>[G]  1 at the last sentence's global token

the "breakpoints" side-input source
(`etc_realformer.features.side_input_sources`):
long tokens attend within the example, each sentence's summary token is
linked to its tokens by `sentence_ids` (with hard g2l masking it sees only
them). Masks are not stored: `masking.py` draws new ones for every batch.

Cutting (`PretrainFeaturizer.examples`): sentences are added to the current
example while it has room for them (L tokens, G sentences); a sentence longer
than `max_sentence_len` pieces is cut to that length; a piece of a document
holding fewer than `min_example_sentences` sentences (the tail of a long
one) is dropped, as BERT drops its too-short tails. Each loss is counted
(`truncation` in the stats).
"""

import collections
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from etc_realformer.errors import UserInputError
from tasks.common.featurization import featurizing
from tasks.common.featurization import tokenization

# Stored per example (`feature_spec`), in this order.
FEATURES = ("token_ids", "word_starts", "sentence_ids", "long_breakpoints",
            "global_token_ids", "global_breakpoints")

# The summary token of every sentence (the original's id).
DEFAULT_GLOBAL_TOKEN_ID = 1

# Sentences per document below which it is not used (the ETC paper: 7).
DEFAULT_MIN_SENTENCES = 7


def feature_spec(long_seq_len: int, global_seq_len: int
                 ) -> Dict[str, Tuple[tf.DType, Tuple[int, ...]]]:
  """The stored features (see the module docstring)."""
  long_names = FEATURES[:4]
  return {name: (tf.int32, (long_seq_len,) if name in long_names
                 else (global_seq_len,)) for name in FEATURES}


def continuation_table(tokenizer: tokenization.Tokenizer) -> np.ndarray:
  """<bool>[vocab]: the piece continues a word (no word starts at it).

  WordPiece marks continuations with a leading "##"; SentencePiece marks
  word starts with a leading "\u2581" instead (its other pieces continue).
  """
  if tokenizer.kind == tokenization.WORDPIECE:
    return np.array([t.startswith("##") for t in tokenizer.vocab])
  with tf.io.gfile.GFile(tokenizer.model_path, "rb") as f:
    model = tf_text.SentencepieceTokenizer(model=f.read())
  pieces = model.id_to_string(tf.range(tokenizer.vocab_size)).numpy()
  return np.array([not p.decode("utf-8", "replace").startswith("\u2581")
                   for p in pieces])


class PretrainFeaturizer(featurizing.Featurizer):
  """Tokenizes documents and cuts them into examples (see the module
  docstring). Tokenization is the in-graph tokenizer of every task; the
  cutting is plain NumPy (pre-training has no raw-input serving)."""

  def __init__(self, vocab_path: Optional[str] = None,
               spm_model_path: Optional[str] = None,
               tokenizer: Optional[tokenization.Tokenizer] = None,
               lower_case: bool = True,
               long_seq_len: int = 4096,
               global_seq_len: int = 512,
               global_token_id: int = DEFAULT_GLOBAL_TOKEN_ID,
               max_sentence_len: Optional[int] = None,
               min_example_sentences: int = 2):
    """Args:
      vocab_path / spm_model_path / tokenizer: the vocabulary (one of them).
      lower_case: uncased vocabulary.
      long_seq_len, global_seq_len: L and G (at least 2).
      global_token_id: the id of every sentence's summary token.
      max_sentence_len: longer sentences are cut to this many pieces
        (default L).
      min_example_sentences: pieces of documents with fewer sentences are
        dropped (at least 2: CPC needs a sentence besides the masked one).

    Raises:
      UserInputError: bad lengths (checked before the vocabulary is read)
        or an unusable vocabulary.
    """
    if min_example_sentences < 1:
      raise UserInputError("min_example_sentences must be positive")
    max_sentence_len = max_sentence_len or long_seq_len
    if not 1 <= max_sentence_len <= long_seq_len:
      raise UserInputError(f"max_sentence_len must be in [1, long_seq_len "
                           f"{long_seq_len}], got {max_sentence_len}")
    super().__init__("pretrain_featurizer", vocab_path, spm_model_path,
                     tokenizer, long_seq_len, global_seq_len, lower_case,
                     min_seq_len=2)
    self.global_token_id = int(global_token_id)
    self.max_sentence_len = int(max_sentence_len)
    self.min_example_sentences = int(min_example_sentences)
    self.continuation = continuation_table(self.tokenizer)

  def feature_spec(self):
    return feature_spec(self.long_seq_len, self.global_seq_len)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def tokenize_tf(self, sentences: tf.Tensor) -> tf.RaggedTensor:
    """<string>[n] sentences -> <int32>[n, (pieces)]."""
    return self.tokenizer.tokenize(sentences)

  def tokenize(self, sentences: Sequence[str]) -> List[np.ndarray]:
    """One document's sentences -> their piece ids (one array each)."""
    if not sentences:
      return []
    ragged = self.tokenize_tf(tf.constant(list(sentences)))
    return split_ragged(ragged.flat_values.numpy(),
                        ragged.row_splits.numpy())

  def examples(self, pieces: Sequence[np.ndarray]
               ) -> Tuple[List[Dict[str, np.ndarray]], Dict[str, int]]:
    """Cuts one document's tokenized sentences into examples.

    Args:
      pieces: the sentences' piece ids, in order (empty ones are skipped).

    Returns:
      (the examples' features, what was dropped: `sentences_cut` and
      `tokens_cut` (long sentences), `short_pieces` and
      `short_piece_tokens` (pieces under `min_example_sentences`)).
    """
    dropped = collections.Counter(sentences_cut=0, tokens_cut=0,
                                  short_pieces=0, short_piece_tokens=0)
    groups: List[List[np.ndarray]] = []
    current: List[np.ndarray] = []
    used = 0
    for sentence in pieces:
      if len(sentence) == 0:
        continue
      if len(sentence) > self.max_sentence_len:
        dropped["sentences_cut"] += 1
        dropped["tokens_cut"] += len(sentence) - self.max_sentence_len
        sentence = sentence[:self.max_sentence_len]
      if current and (used + len(sentence) > self.long_seq_len or
                      len(current) == self.global_seq_len):
        groups.append(current)
        current, used = [], 0
      current.append(sentence)
      used += len(sentence)
    if current:
      groups.append(current)
    examples = []
    for group in groups:
      if len(group) < self.min_example_sentences:
        dropped["short_pieces"] += 1
        dropped["short_piece_tokens"] += sum(len(s) for s in group)
        continue
      examples.append(self.example(group))
    return examples, dict(dropped)

  def example(self, sentences: Sequence[np.ndarray]
              ) -> Dict[str, np.ndarray]:
    """The features of sentences that fit one example."""
    long_len, global_len = self.long_seq_len, self.global_seq_len
    ids = np.concatenate(sentences).astype(np.int32)
    n, num_sentences = len(ids), len(sentences)
    if n > long_len or num_sentences > global_len:
      raise ValueError(f"{n} tokens / {num_sentences} sentences do not fit "
                       f"L={long_len}, G={global_len}")
    sentence_ids = np.repeat(np.arange(num_sentences, dtype=np.int32),
                             [len(s) for s in sentences])
    starts = ~self.continuation[ids]
    # Every sentence starts a word, whatever its first piece.
    starts[np.cumsum([0] + [len(s) for s in sentences[:-1]])] = True
    out = {name: np.zeros([long_len], np.int32) for name in FEATURES[:4]}
    out.update({name: np.zeros([global_len], np.int32)
                for name in FEATURES[4:]})
    out["token_ids"][:n] = ids
    out["word_starts"][:n] = starts
    out["sentence_ids"][:n] = sentence_ids
    out["long_breakpoints"][n - 1] = 1
    out["global_token_ids"][:num_sentences] = self.global_token_id
    out["global_breakpoints"][num_sentences - 1] = 1
    return out


def split_ragged(values: np.ndarray, row_splits: np.ndarray
                 ) -> List[np.ndarray]:
  """The rows of a ragged tensor's flat values (empty rows kept)."""
  return [values[a:b].astype(np.int32)
          for a, b in zip(row_splits[:-1], row_splits[1:])]


def sentence_lengths(example: Dict[str, Any]) -> np.ndarray:
  """<int>[num_sentences]: the pieces of each sentence of an example."""
  num_sentences = int(np.sum(example["global_token_ids"] > 0))
  real = int(np.argmax(example["long_breakpoints"])) + 1
  return np.bincount(example["sentence_ids"][:real],
                     minlength=num_sentences)
