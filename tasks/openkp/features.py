"""OpenKP featurization: document text + VDOM -> ETC raw features, in TF ops.

One code path serves preprocessing (through `tf.data`, see `preprocess.py`)
and serving (inside a SavedModel signature, see `task.py`).

Segments (as the original ETC OpenKP featurization):

  global: one token per VDOM element (id 1), padding also id 1 (the
          original's `[1] * global_max_length`; `global_input_mask` tells
          the padding);
  long:   the wordpieces of the words, each word tokenized on its own
          (words = `text.split(" ")`), padding (id 0).

- `long_sentence_ids[i]`: the VDOM element (= global index) of wordpiece i;
  the side inputs let each long token attend its own element's global token.
- `long_word_ids[i]`: the word of wordpiece i (the head sums wordpieces into
  words); word-level tensors use the long length L as their word axis.
- `word_mask[w]`: 1 for the kept words (some words have no wordpiece, e.g.
  the empty words of double spaces; they still count as words).
- `global_vdom_features[g]`: the element's 20 raw VDOM numbers; the model
  turns them into embeddings (`head.VdomEmbedding`), so scaling ranges can
  change without re-preprocessing.
- Labels (`label_start`, `label_length`, 3 slots, -1 padding): the (start
  word, length) of each gold keyphrase's first whole-word occurrence inside a
  VDOM element (`data.keyphrase_positions`), when it lies in the kept words
  and has at most `MAX_PHRASE_WORDS` words; in the original's order (by
  element, then by phrase).

Truncation keeps a prefix of the words: word w is kept while w < L, its
element < G and the wordpieces up to and including it fit L. (The original
drops the whole element that does not fit; keeping its fitting words loses
less text and a single huge first element no longer empties the document.)
"""

from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from tasks.common.featurization import featurizing
from tasks.common.featurization import tokenization
from tasks.openkp import data

# Longest keyphrase, in words, the head scores (the original's kp_max_length).
MAX_PHRASE_WORDS = 5
MAX_LABELS = data.MAX_KEYPHRASES
NUM_VDOM_FEATURES = data.NUM_VDOM_FEATURES
# Global token id of a VDOM element (the pre-training sentence token, id 1 in
# both the WordPiece and the SentencePiece ETC vocabularies). The global
# padding carries it too, as the original's features do.
ELEMENT_TOKEN_ID = 1
PAD_ID = 0

# The numeric features the model reads (the `serving_default` inputs).
MODEL_FEATURES: Tuple[str, ...] = (
    "token_ids", "long_input_mask", "long_word_ids", "long_sentence_ids",
    "word_mask", "global_token_ids", "global_input_mask",
    "global_vdom_features")
TRUNCATION_STATS: Tuple[str, ...] = ("words_dropped", "wordpieces_dropped",
                                     "elements_dropped")


def feature_spec(
    long_seq_len: int = 4096, global_seq_len: int = 512
) -> Dict[str, Tuple[tf.DType, Tuple[Optional[int], ...]]]:
  """The OpenKP features: name -> (dtype, unbatched shape).

  L = long_seq_len, G = global_seq_len.

  token_ids [L]: wordpiece ids; 0 = padding.
  long_input_mask [L]: 1 for wordpieces.
  long_word_ids [L]: word index of each wordpiece; 0 for padding.
  long_sentence_ids [L]: VDOM element (global index) of each wordpiece; 0 for
    padding.
  word_mask [L]: 1 for the kept words (word axis).
  global_token_ids [G]: 1 (kept VDOM elements and padding alike).
  global_input_mask [G]: 1 per kept VDOM element.
  global_vdom_features [G, 20]: raw VDOM `feature` numbers per element.
  label_start [3], label_length [3]: gold (start word, words); -1 padding.
  num_words []: number of kept words.
  url []: the document URL (example id).
  words [None]: the kept words (for decoding phrases).
  keyphrases [None]: the gold keyphrases, lower-cased (for the metric; all
    valid ones, also those cut by truncation); empty when unlabelled.
  """
  long_, global_ = (long_seq_len,), (global_seq_len,)
  return {
      "token_ids": (tf.int32, long_),
      "long_input_mask": (tf.int32, long_),
      "long_word_ids": (tf.int32, long_),
      "long_sentence_ids": (tf.int32, long_),
      "word_mask": (tf.int32, long_),
      "global_token_ids": (tf.int32, global_),
      "global_input_mask": (tf.int32, global_),
      "global_vdom_features": (tf.float32,
                               (global_seq_len, NUM_VDOM_FEATURES)),
      "label_start": (tf.int32, (MAX_LABELS,)),
      "label_length": (tf.int32, (MAX_LABELS,)),
      "num_words": (tf.int32, ()),
      "url": (tf.string, ()),
      "words": (tf.string, (None,)),
      "keyphrases": (tf.string, (None,)),
  }


def make_labels(positions: Sequence[Tuple[int, int]], num_words: int
                ) -> Tuple[np.ndarray, np.ndarray, int]:
  """Label slots from keyphrase positions and the kept word count.

  Returns:
    (label_start <int32>[3], label_length <int32>[3], number of positions
    dropped because they are cut by truncation or longer than
    MAX_PHRASE_WORDS).
  """
  kept = [(s, n) for s, n in positions
          if s + n <= num_words and 1 <= n <= MAX_PHRASE_WORDS][:MAX_LABELS]
  starts = np.full([MAX_LABELS], -1, np.int32)
  lengths = np.full([MAX_LABELS], -1, np.int32)
  for i, (s, n) in enumerate(kept):
    starts[i], lengths[i] = s, n
  return starts, lengths, len(positions) - len(kept)


# ----------------------------------------------------------- VDOM in-graph
# The three keys the featurizer needs, matched as JSON keys. Inside a JSON
# string value every `"` is escaped (`\"`), so `"start_idx"` followed by `:`
# can only be a key: text that mentions these names cannot fool the regex.
_START_RE = r'"start_idx"\s*:\s*-?\d+'
_END_RE = r'"end_idx"\s*:\s*-?\d+'
_FEATURE_RE = r'"feature"\s*:\s*\[[^\]]*\]'
_ANY_KEY_RE = f"{_START_RE}|{_END_RE}|{_FEATURE_RE}"


# A released VDOM: a JSON array (of element objects).
_ARRAY_RE = r"(?s)\s*\[.*\]\s*"
# A JSON number (what the released files hold; Python's json also writes
# NaN, Infinity and -Infinity, which are refused).
_NUMBER_RE = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
# Strings: a name for the messages, fixed or built in the graph.
Where = Union[str, tf.Tensor]


def _check(condition: tf.Tensor, where: Where, what: str) -> tf.Operation:
  """Fails the run with "<where>: <what>" (an InvalidArgumentError)."""
  return tf.debugging.Assert(condition, [tf.strings.join([where, ": ", what])])


def parse_vdom_tf(vdom: tf.Tensor, where: Where = "VDOM"
                  ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """Parses the released VDOM JSON string in the graph (for serving).

  Only `start_idx`, `end_idx` and `feature` are read (the element texts are
  the words [start_idx, end_idx) of the text). Elements must list their keys
  once each, as the released files do.

  Args:
    vdom: <string>[] a VDOM JSON string.
    where: names the input (and record) in the messages.

  Returns:
    (start_idx <int32>[E], end_idx <int32>[E], features <float32>[E, 20]).

  Raises:
    tf.errors.InvalidArgumentError (at run time), naming `where`: the string
      is not a JSON array holding at least one element, the three keys do
      not appear equally often, a feature list does not hold 20 numbers, or
      a feature number is not finite (NaN, Infinity, or out of float32's
      range): a bad number would turn every logit into NaN.
  """
  vdom = tf.reshape(tf.convert_to_tensor(vdom, tf.string), [1])
  pieces = tf_text.regex_split(vdom, _ANY_KEY_RE, _ANY_KEY_RE).flat_values

  def values(pattern: str) -> tf.Tensor:
    matches = tf.boolean_mask(
        pieces, tf.strings.regex_full_match(pieces, pattern))
    return tf.strings.regex_replace(matches, r'^"[a-z_]+"\s*:\s*', "")

  starts = tf.strings.to_number(values(_START_RE), tf.int32)
  ends = tf.strings.to_number(values(_END_RE), tf.int32)
  lists = tf.strings.regex_replace(values(_FEATURE_RE), r"[\[\]\s]", "")
  numbers = tf.strings.split(lists, ",")  # [E, (20)]
  checks = [
      # Text that is not the VDOM JSON (e.g. plain text) holds no element:
      # it would silently featurize as a document without elements.
      _check(tf.reduce_all(tf.strings.regex_full_match(vdom, _ARRAY_RE)) &
             (tf.size(starts) > 0), where,
             "not a VDOM JSON array of elements with start_idx, end_idx and "
             "feature"),
      _check(tf.equal(tf.size(starts), tf.size(ends)), where,
             "start_idx and end_idx counts differ"),
      _check(tf.equal(tf.size(starts), tf.size(lists)), where,
             "start_idx and feature counts differ"),
      _check(tf.reduce_all(tf.equal(numbers.row_lengths(),
                                    NUM_VDOM_FEATURES)), where,
             f"a feature list without {NUM_VDOM_FEATURES} numbers"),
      _check(tf.reduce_all(
          tf.strings.regex_full_match(numbers.flat_values, _NUMBER_RE)),
             where, "a feature value that is not a finite JSON number "
             "(NaN, Infinity or not a number)"),
  ]
  with tf.control_dependencies(checks):
    starts, ends = tf.identity(starts), tf.identity(ends)
    features = tf.reshape(
        tf.strings.to_number(numbers.flat_values, tf.float32),
        [-1, NUM_VDOM_FEATURES])
  with tf.control_dependencies([_check(
      tf.reduce_all(tf.math.is_finite(features)), where,
      "a feature number out of float32's range")]):
    features = tf.identity(features)
  return starts, ends, features


# `OpenKPFeaturizer.featurize_with_stats`'s inputs: the text, each VDOM element's
# first word and its 20 numbers.
INPUT_SIGNATURE = (
    tf.TensorSpec([], tf.string, name="text"),
    tf.TensorSpec([None], tf.int32, name="element_starts"),
    tf.TensorSpec([None, NUM_VDOM_FEATURES], tf.float32,
                  name="element_features"))


def record_inputs(record: data.OpenKPRecord
                  ) -> Tuple[str, List[int], List[Tuple[float, ...]]]:
  """A validated record's `INPUT_SIGNATURE` values."""
  return record.text, record.element_starts, record.element_features


class OpenKPFeaturizer(featurizing.Featurizer):
  """Text + VDOM elements -> the model features of `feature_spec`, in TF ops.

  Example:
    featurizer = OpenKPFeaturizer(vocab_path="vocab.txt", long_seq_len=4096,
                                  global_seq_len=512)
    features, stats = featurizer.featurize_with_stats(text, starts,
                                                      vdom_features)
  """

  def __init__(self,
               vocab_path: Optional[str] = None,
               spm_model_path: Optional[str] = None,
               *,
               tokenizer: Optional[tokenization.Tokenizer] = None,
               long_seq_len: int = 4096,
               global_seq_len: int = 512,
               lower_case: bool = True):
    """Builds a featurizer.

    Args:
      vocab_path: a BERT `vocab.txt` (WordPiece).
      spm_model_path: a SentencePiece `.model` (instead of `vocab_path`).
      tokenizer: a ready tokenizer (instead of both paths).
      long_seq_len: L, the long input length (also the word axis length).
      global_seq_len: G, the global input length (VDOM elements kept).
      lower_case: uncased vocabulary.
    """
    super().__init__("openkp_featurizer", vocab_path, spm_model_path,
                     tokenizer, long_seq_len, global_seq_len, lower_case)
    self._record_fn = tf.function(self._featurize,
                                     input_signature=INPUT_SIGNATURE)

  def feature_spec(self):
    return feature_spec(self.long_seq_len, self.global_seq_len)

  @property
  def record_fn(self):
    """The compiled (text, element_starts, element_features) -> (features,
    stats) function, for `tf.data` pipelines."""
    return self._record_fn

  def featurize_with_stats(self, text: tf.Tensor, element_starts: tf.Tensor,
                           element_features: tf.Tensor
                           ) -> Tuple[Dict[str, tf.Tensor],
                                      Dict[str, tf.Tensor]]:
    """One document's model features and truncation stats.

    Args:
      text: <string>[] the document text.
      element_starts: <int32>[E] each VDOM element's first word (`start_idx`;
        elements are contiguous, so the ends are implied).
      element_features: <float32>[E, 20] the elements' `feature` numbers.

    Returns:
      (features: the `MODEL_FEATURES` plus `num_words` <int32>[] and `words`
      <string>[num_words]; stats: <int32>[] `TRUNCATION_STATS`).
    """
    return self._record_fn(
        tf.convert_to_tensor(text, tf.string),
        tf.cast(element_starts, tf.int32),
        tf.cast(element_features, tf.float32))

  def featurize(self, text: tf.Tensor, vdom: tf.Tensor,
                where: Where = "VDOM") -> Dict[str, tf.Tensor]:
    """The serving form: `featurize_with_stats`'s features from the released
    VDOM JSON string.

    The VDOM is checked as preprocessing checks it (`parse_vdom_tf`, and its
    elements contiguous from word 0 to the last word of `text`); a bad one
    fails the run with an InvalidArgumentError naming `where`.
    """
    starts, ends, feats = parse_vdom_tf(vdom, where)
    num_words = tf.size(tf.strings.split(text, sep=" "), out_type=tf.int32)
    contiguous = (tf.reduce_all(tf.equal(starts[:1], 0)) &
                  tf.reduce_all(tf.equal(starts[1:], ends[:-1])) &
                  tf.reduce_all(ends >= starts) &
                  tf.reduce_all(tf.equal(ends[-1:], num_words)))
    with tf.control_dependencies([_check(
        contiguous, where, "the elements do not cover the words of `text` "
        "one after another (start_idx of each = end_idx of the one before, "
        "from word 0 to the last word)")]):
      starts = tf.identity(starts)
    features, _ = self.featurize_with_stats(text, starts, feats)
    return features

  def featurize_record(self, record: data.OpenKPRecord
                       ) -> Tuple[Dict[str, np.ndarray], Dict[str, int]]:
    """Eager helper: a validated record -> all `feature_spec` features (with
    labels, url and gold keyphrases) and stats (with `keyphrases_truncated`:
    gold positions lost to truncation or too long, and
    `keyphrases_across_elements`: gold phrases found only across elements)."""
    features, stats = self.featurize_with_stats(*record_inputs(record))
    out = {k: v.numpy() for k, v in features.items()}
    stats = {k: int(v.numpy()) for k, v in stats.items()}
    add_record_fields(out, record, stats)
    return out, stats

  # --------------------------------------------------------- implementation
  def _featurize(self, text, element_starts, element_features):
    L, G = self.long_seq_len, self.global_seq_len  # pylint: disable=invalid-name
    i32 = tf.int32
    words = tf.strings.split(text, sep=" ")  # as Python's str.split(" ")
    num_all_words = tf.size(words, out_type=i32)
    pieces = self.tokenizer.tokenize(words)  # [W, (p_w)]
    piece_counts = tf.cast(pieces.row_lengths(), i32)
    num_elements_all = tf.size(element_starts, out_type=i32)
    # Element of each word: the last element starting at or before it.
    word_element = tf.maximum(
        tf.searchsorted(element_starts, tf.range(num_all_words),
                        side="right") - 1, 0)
    word_element = tf.cast(word_element, i32)
    fits = ((tf.range(num_all_words) < L) & (word_element < G) &
            (tf.cumsum(piece_counts) <= L))
    # A prefix: every condition is monotone in the word index.
    num_words = tf.reduce_sum(tf.cast(fits, i32))
    kept_words = words[:num_words]
    kept_pieces = pieces[:num_words]
    token_ids = kept_pieces.flat_values
    piece_word = tf.cast(kept_pieces.value_rowids(), i32)
    piece_element = tf.gather(word_element, piece_word)
    num_pieces = tf.size(token_ids, out_type=i32)
    num_elements = tf.where(
        num_words == num_all_words, tf.minimum(num_elements_all, G),
        tf.gather(word_element, tf.maximum(num_words - 1, 0)) + 1)
    num_elements = tf.where(num_words > 0, num_elements, 0)

    fit = featurizing.fit
    features = {
        "token_ids": fit(token_ids, L, PAD_ID),
        "long_input_mask": fit(tf.ones([num_pieces], i32), L, 0),
        "long_word_ids": fit(piece_word, L, 0),
        "long_sentence_ids": fit(piece_element, L, 0),
        "word_mask": fit(tf.ones([num_words], i32), L, 0),
        "global_token_ids": tf.fill([G], ELEMENT_TOKEN_ID),
        "global_input_mask": fit(tf.ones([num_elements], i32), G, 0),
        "global_vdom_features": fit(element_features[:num_elements], G, 0.0),
        "num_words": num_words,
        "words": kept_words,
    }
    stats = {
        "words_dropped": num_all_words - num_words,
        "wordpieces_dropped": tf.reduce_sum(piece_counts) - num_pieces,
        "elements_dropped": num_elements_all - num_elements,
    }
    return features, stats


def add_record_fields(features: Dict[str, np.ndarray],
                      record: data.OpenKPRecord,
                      stats: Dict[str, int]) -> None:
  """Adds labels, url and gold keyphrases of a record to eager features."""
  positions = data.keyphrase_positions(record)
  starts, lengths, lost = make_labels(positions, int(features["num_words"]))
  features["label_start"] = starts
  features["label_length"] = lengths
  features["url"] = record.url
  gold = sorted({kp.lower() for kp in (record.keyphrases or ())})
  features["keyphrases"] = np.array(gold, dtype=object)
  stats["keyphrases_truncated"] = lost
  # Gold phrases that occur only across a VDOM element boundary: no label
  # (as the original), still counted by the metric.
  stats["keyphrases_across_elements"] = len(gold) - len(positions)

