"""Natural Questions featurization: one document -> ETC windows, in TF ops.

One NQ example (question + document tokens + long-answer candidates) becomes
W windows (W >= 1) of fixed-shape features, laid out as the original ETC NQ
preprocessing (`etcmodel/models/nq/preproc_nq_lib.py`):

* Document wordpieces: only the tokens inside TOP-LEVEL long-answer
  candidates are kept (in document order); every kept token is tokenized on
  its own; an HTML token becomes ONE special wordpiece: `html_end`
  (BERT `[unused103]`, ETC SentencePiece `<unused_36>`) when its text starts
  with "</", else `html_start` (`[unused102]` / `<unused_35>`); see
  `NqTokenIds`.
* Question: its first `max_question_len` (32) wordpieces (q <= 32).
* Windows: `doc_len = L - q - 3` wordpieces per window, window w starting
  at wordpiece `w * stride` (stride 2048 for L 4096), for
  `w in range(0, max(n - doc_len, 0) + stride, stride)` (n = the document's
  wordpieces): W = ceil(max(n - doc_len, 0) / stride) + 1.
* Long input [L]: `[CLS] question [SEP] window [SEP] [PAD]...`.
* Global input [G]: `[CLS]`, then q + 1 question tokens (one per question
  wordpiece and one for the question's [SEP]; id `global_question` = 35),
  then one sentence token (id `global_sentence` = 1) per run of window
  wordpieces from the same top-level candidate (a candidate cut by the window
  start / end still gets its token), then one token (id 0) for the final
  [SEP] and the padding. When the global input is full (G tokens), later
  long tokens share the last global token (the original's choice); their
  candidates get no global token (counted in the stats as
  `candidates_without_global_token`).

Feature names, dtypes and unbatched shapes (`feature_spec`; L =
long_seq_len, G = global_seq_len):

Model inputs (`MODEL_FEATURES`):
  token_ids          int32 [L]  wordpiece ids; 0 = padding.
  segment_ids        int32 [L]  all 0 (the original fed no token types).
  long_breakpoints   int32 [L]  1 at the final [SEP] (last real token).
  sentence_ids       int32 [L]  global index of each long token's global
                                token: CLS -> 0, question wordpiece i -> i+1,
                                question [SEP] -> q+1, a window wordpiece ->
                                its candidate run's sentence token, final
                                [SEP] and padding -> the trailing token.
  global_token_ids   int32 [G]  see above; 0 = padding.
  global_segment_ids int32 [G]  all 0.
  global_breakpoints int32 [G]  1 at the last real global token.
  `nq_side_inputs(config, features)` turns the breakpoints and sentence ids
  into the eight ETC side inputs (`make_global_local_side_inputs`, as the
  original).

Bookkeeping (for decoding / scoring; int32 unless noted):
  example_id               int64 []  the NQ `example_id`.
  window_index             []        w, 0-based, in the example.
  num_windows              []        W of the example.
  doc_token_map            [L]  document token index (into
                                `document_tokens` / the space-split
                                `document_text`) of each long position; all
                                wordpieces of a token map to it; -1 for CLS,
                                question, both [SEP]s and padding.
  long_candidate_index     [L]  index in `long_answer_candidates` of the
                                top-level candidate holding the token; -1
                                elsewhere (the original's `candidate_ids`).
  long_start_byte, long_end_byte  int64 [L]  byte span [start, end) of the
                                document token of each position; -1 where
                                doc_token_map is -1 or bytes are unknown
                                (simplified format).
  global_candidate_index   [G]  for a candidate sentence token, its
                                candidate's index in `long_answer_candidates`;
                                -1 otherwise (CLS, question, trailing token,
                                padding).
  global_candidate_long_start, global_candidate_long_end  [G]  inclusive
                                long positions of the first / last wordpiece
                                of that candidate inside this window; -1
                                otherwise.
  global_candidate_doc_start, global_candidate_doc_end  [G]  the candidate's
                                `start_token` / `end_token` (end exclusive,
                                NQ convention); -1 otherwise.
  global_candidate_start_byte, global_candidate_end_byte  int64 [G]  the
                                candidate's `start_byte` / `end_byte`; -1
                                otherwise or unknown.

Labels (`LABEL_FEATURES`; from the FIRST annotation, as the original):
  answer_type  []  `ANSWER_TYPES` index: 0 null, 1 yes, 2 no, 3 long,
               4 short; -1 for an unlabelled example (serving, test set).
               Per example: yes/no if `yes_no_answer` is YES/NO, else short
               if there are short answers, else long if there is a long
               answer, else null. Per window: a short (long) example becomes
               null in a window that does not fully hold its short (long)
               span; yes/no stays in every window (as the original).
  long_start, long_end    []  inclusive long positions of the long answer's
               first / last wordpiece; 0, 0 (CLS) unless the whole span is
               inside the window (or no long answer / unlabelled).
  short_start, short_end  []  the same for the short answer: from the first
               short span's start to the last short span's end (several
               spans are merged, as the original); 0, 0 likewise.
"""

import dataclasses
from typing import Dict, Optional, Tuple

import tensorflow as tf

from tasks.common import tfrecords
from tasks.common import tokenization

# Answer types (the answer type head's classes), in the original's order.
NULL, YES, NO, LONG, SHORT = range(5)
ANSWER_TYPES: Tuple[str, ...] = ("null", "yes", "no", "long", "short")

# Original settings.
DEFAULT_LONG_SEQ_LEN = 4096
DEFAULT_GLOBAL_SEQ_LEN = 230
DEFAULT_STRIDE = 2048
DEFAULT_MAX_QUESTION_LEN = 32

MODEL_FEATURES: Tuple[str, ...] = (
    "token_ids", "segment_ids", "long_breakpoints", "sentence_ids",
    "global_token_ids", "global_segment_ids", "global_breakpoints")
LABEL_FEATURES: Tuple[str, ...] = (
    "answer_type", "long_start", "long_end", "short_start", "short_end")
# Per-window bookkeeping the decoder reads.
BOOKKEEPING_FEATURES: Tuple[str, ...] = (
    "example_id", "window_index", "num_windows", "doc_token_map",
    "long_candidate_index", "long_start_byte", "long_end_byte",
    "global_candidate_index", "global_candidate_long_start",
    "global_candidate_long_end", "global_candidate_doc_start",
    "global_candidate_doc_end", "global_candidate_start_byte",
    "global_candidate_end_byte")

_LONG_INT32 = ("token_ids", "segment_ids", "long_breakpoints", "sentence_ids",
               "doc_token_map", "long_candidate_index")
_LONG_INT64 = ("long_start_byte", "long_end_byte")
_GLOBAL_INT32 = ("global_token_ids", "global_segment_ids",
                 "global_breakpoints", "global_candidate_index",
                 "global_candidate_long_start", "global_candidate_long_end",
                 "global_candidate_doc_start", "global_candidate_doc_end")
_GLOBAL_INT64 = ("global_candidate_start_byte", "global_candidate_end_byte")


def feature_spec(
    long_seq_len: int = DEFAULT_LONG_SEQ_LEN,
    global_seq_len: int = DEFAULT_GLOBAL_SEQ_LEN
) -> Dict[str, Tuple[tf.DType, Tuple[Optional[int], ...]]]:
  """The per-window NQ features: name -> (dtype, unbatched shape).

  See the module docstring for the meaning of each feature.
  """
  long_, global_ = (long_seq_len,), (global_seq_len,)
  spec = {}
  spec.update({k: (tf.int32, long_) for k in _LONG_INT32})
  spec.update({k: (tf.int64, long_) for k in _LONG_INT64})
  spec.update({k: (tf.int32, global_) for k in _GLOBAL_INT32})
  spec.update({k: (tf.int64, global_) for k in _GLOBAL_INT64})
  spec["example_id"] = (tf.int64, ())
  spec["window_index"] = (tf.int32, ())
  spec["num_windows"] = (tf.int32, ())
  spec.update({k: (tf.int32, ()) for k in LABEL_FEATURES})
  return spec


def make_dataset(file_patterns, long_seq_len: int = DEFAULT_LONG_SEQ_LEN,
                 global_seq_len: int = DEFAULT_GLOBAL_SEQ_LEN
                 ) -> tf.data.Dataset:
  """Unbatched dataset of parsed NQ windows from cached TFRecords."""
  return tfrecords.make_dataset(file_patterns,
                                feature_spec(long_seq_len, global_seq_len))


def nq_side_inputs(config, features):
  """The eight ETC side inputs for NQ windows (batched or not).

  As the original (`input_utils.add_side_input_features`): the global-local
  pattern from `long_breakpoints`, `global_breakpoints` and `sentence_ids`,
  with the config's local radius, relative distance and hard masks.
  """
  from etc_realformer.features import side_inputs  # pylint: disable=g-import-not-at-top
  return side_inputs.make_global_local_side_inputs(
      long_breakpoints=features["long_breakpoints"],
      global_breakpoints=features["global_breakpoints"],
      sentence_ids=features["sentence_ids"],
      local_radius=config.local_radius,
      relative_pos_max_distance=config.relative_pos_max_distance,
      use_hard_g2l_mask=config.use_hard_g2l_mask,
      use_hard_l2g_mask=config.use_hard_l2g_mask)


@dataclasses.dataclass(frozen=True)
class NqTokenIds:
  """Vocabulary ids the featurizer writes besides the text's wordpieces."""
  cls: int
  sep: int
  html_start: int
  html_end: int
  global_cls: int
  global_question: int = 35   # [unused34] / <unused_34>, as the original
  global_sentence: int = 1    # [unused0] / <unused_0>
  global_trailing: int = 0   # the final [SEP]'s global token (original: 0)

  @classmethod
  def for_tokenizer(cls, tokenizer: tokenization.Tokenizer) -> "NqTokenIds":
    """The original's ids, looked up by name in the tokenizer's vocabulary.

    WordPiece: [CLS], [SEP], [unused102] (HTML start tag), [unused103] (end
    tag). SentencePiece (ETC's ALBERT-style model): <unused_63>, <unused_2>,
    <unused_35>, <unused_36>.

    Raises:
      ValueError: a name is missing from the vocabulary (pass explicit ids).
    """
    if tokenizer.kind == tokenization.WORDPIECE:
      names = ("[CLS]", "[SEP]", "[unused102]", "[unused103]")
      vocab = {t: i for i, t in enumerate(tokenizer.vocab)}
      missing = [n for n in names if n not in vocab]
      ids = [vocab.get(n) for n in names]
    else:
      names = ("<unused_63>", "<unused_2>", "<unused_35>", "<unused_36>")
      inner = tokenizer._tokenizer  # pylint: disable=protected-access
      ids = [int(i) for i in inner.string_to_id(tf.constant(names)).numpy()]
      unk = int(inner.string_to_id(tf.constant("<unk>")).numpy())
      missing = [n for n, i in zip(names, ids) if i == unk]
    if missing:
      raise ValueError(
          f"vocabulary has no {missing}: the NQ featurizer needs cls, sep and "
          "the HTML start/end tokens; pass NqTokenIds(...) explicitly")
    return cls(cls=ids[0], sep=ids[1], html_start=ids[2], html_end=ids[3],
               global_cls=ids[0])
