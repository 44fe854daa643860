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
  The task builds the eight ETC side inputs from the breakpoints and
  sentence ids (its `side_input_source` "breakpoints":
  `make_global_local_side_inputs`, as the original).

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
  answer_type  []  `data.ANSWER_TYPES` index: 0 null, 1 yes, 2 no, 3 long,
               4 short; -1 for an unlabelled example (serving, test set).
               Per example: yes/no if `yes_no_answer` is YES/NO, else short
               if there are short answers, else long if there is a long
               answer, else null. Per window (as the original): a short
               (long) example becomes null in a window where both
               short_start and short_end (long_start and long_end) are 0,
               i.e. that holds neither end of the span; a span cut by the
               window edge keeps its type; yes/no stays in every window.
  long_start, long_end    []  long positions (counted from [CLS], so a
               document wordpiece sits at q + 2 + its offset in the window)
               of the long answer's first token's first wordpiece in the
               window and of its last token's last wordpiece in the window.
               Each is looked up on its own and is 0 (CLS) when the window
               lacks that token (or no long answer / unlabelled): a span cut
               by the window edge gets one real end and a 0.
  short_start, short_end  []  the same for the short answer: from the first
               short span's start to the last short span's end (several
               spans are merged, as the original).
"""

import dataclasses
from typing import ClassVar, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from etc_realformer.errors import UserInputError
from tasks.common.featurization import featurizing
from tasks.common.featurization import segments
from tasks.common.featurization import tokenization
from tasks.nq import data

# Original settings.
DEFAULT_LONG_SEQ_LEN = 4096
DEFAULT_GLOBAL_SEQ_LEN = 230
DEFAULT_STRIDE = 2048
DEFAULT_MAX_QUESTION_LEN = 32

DOC_TOKEN_MAP = "doc_token_map"
LONG_CANDIDATE_INDEX = "long_candidate_index"
LONG_START_BYTE = "long_start_byte"
LONG_END_BYTE = "long_end_byte"
GLOBAL_CANDIDATE_INDEX = "global_candidate_index"
GLOBAL_CANDIDATE_LONG_START = "global_candidate_long_start"
GLOBAL_CANDIDATE_LONG_END = "global_candidate_long_end"
GLOBAL_CANDIDATE_DOC_START = "global_candidate_doc_start"
GLOBAL_CANDIDATE_DOC_END = "global_candidate_doc_end"
GLOBAL_CANDIDATE_START_BYTE = "global_candidate_start_byte"
GLOBAL_CANDIDATE_END_BYTE = "global_candidate_end_byte"
EXAMPLE_ID = "example_id"
WINDOW_INDEX = "window_index"
NUM_WINDOWS = "num_windows"


def _bookkeeping(name: str, dtype: tf.DType = tf.int32) -> segments.Feature:
  """A feature decoding reads: -1 where it does not apply."""
  return segments.Feature(name, -1, dtype, model_input=False)


# A window's long and global features: the breakpoints side-input source
# (long tokens past a full global input, and the padding, share its last
# token, as the original) and the bookkeeping of decoding.
SEGMENT_PLAN = segments.SegmentPlan(
    segments.BREAKPOINTS,
    long_features=(_bookkeeping(DOC_TOKEN_MAP),
                   _bookkeeping(LONG_CANDIDATE_INDEX),
                   _bookkeeping(LONG_START_BYTE, tf.int64),
                   _bookkeeping(LONG_END_BYTE, tf.int64)),
    global_features=(_bookkeeping(GLOBAL_CANDIDATE_INDEX),
                     _bookkeeping(GLOBAL_CANDIDATE_LONG_START),
                     _bookkeeping(GLOBAL_CANDIDATE_LONG_END),
                     _bookkeeping(GLOBAL_CANDIDATE_DOC_START),
                     _bookkeeping(GLOBAL_CANDIDATE_DOC_END),
                     _bookkeeping(GLOBAL_CANDIDATE_START_BYTE, tf.int64),
                     _bookkeeping(GLOBAL_CANDIDATE_END_BYTE, tf.int64)),
    share_last_global=True)

MODEL_FEATURES: Tuple[str, ...] = SEGMENT_PLAN.model_features
LABEL_FEATURES: Tuple[str, ...] = (
    "answer_type", "long_start", "long_end", "short_start", "short_end")
# Per-window bookkeeping the decoder reads.
BOOKKEEPING_FEATURES: Tuple[str, ...] = (
    (EXAMPLE_ID, WINDOW_INDEX, NUM_WINDOWS) +
    tuple(name for name in SEGMENT_PLAN.names if name not in MODEL_FEATURES))


def feature_spec(
    long_seq_len: int = DEFAULT_LONG_SEQ_LEN,
    global_seq_len: int = DEFAULT_GLOBAL_SEQ_LEN
) -> Dict[str, Tuple[tf.DType, Tuple[Optional[int], ...]]]:
  """The per-window NQ features: name -> (dtype, unbatched shape).

  See the module docstring for the meaning of each feature.
  """
  spec = SEGMENT_PLAN.spec(long_seq_len, global_seq_len)
  spec[EXAMPLE_ID] = (tf.int64, ())
  spec[WINDOW_INDEX] = (tf.int32, ())
  spec[NUM_WINDOWS] = (tf.int32, ())
  spec.update({k: (tf.int32, ()) for k in LABEL_FEATURES})
  return spec


@dataclasses.dataclass(frozen=True)
class NqTokenIds(featurizing.SpecialTokenIds):
  """Vocabulary ids the featurizer writes besides the text's wordpieces.

  `NqTokenIds.for_tokenizer(tokenizer)` gives the original's: WordPiece
  [CLS], [SEP], [unused102] (HTML start tag), [unused103] (end tag);
  SentencePiece (ETC's ALBERT-style model) <unused_63>, <unused_2>,
  <unused_35>, <unused_36>; it raises `UserInputError` when the vocabulary
  lacks one (pass explicit ids then).
  """
  cls: int
  sep: int
  html_start: int
  html_end: int
  global_cls: int
  global_question: int = 35   # [unused34] / <unused_34>, as the original
  global_sentence: int = 1    # [unused0] / <unused_0>
  global_trailing: int = 0   # the final [SEP]'s global token (original: 0)

  _FIXED: ClassVar = {"global_question": 35, "global_sentence": 1,
                      "global_trailing": 0}
  WORDPIECE: ClassVar = {"cls": "[CLS]", "sep": "[SEP]",
                         "html_start": "[unused102]",
                         "html_end": "[unused103]", "global_cls": "[CLS]",
                         **_FIXED}
  SENTENCEPIECE: ClassVar = {"cls": "<unused_63>", "sep": "<unused_2>",
                             "html_start": "<unused_35>",
                             "html_end": "<unused_36>",
                             "global_cls": "<unused_63>", **_FIXED}


# Tags whose elements are NQ long-answer candidates (used only when a caller
# has no `long_answer_candidates`, e.g. serving a raw document).
CANDIDATE_TAGS: Tuple[str, ...] = ("p", "table", "tr", "ul", "ol", "dl", "li",
                                   "dd", "dt")


def split_document_text(document_text: tf.Tensor
                        ) -> Tuple[tf.Tensor, tf.Tensor]:
  """The simplified format's `document_text` -> (tokens [N], is_html [N]).

  Splits on single spaces (as `natural_questions.text_utils.get_nq_tokens`);
  a token is HTML when it looks like a tag (`<P>`, `</Td>`, `<Td_colspan=..>`).
  """
  tokens = tf.strings.split(tf.reshape(document_text, []), " ")
  is_html = tf.strings.regex_full_match(tokens, r"</?[A-Za-z][^<>]*>")
  return tokens, is_html


def html_candidates(doc_tokens: tf.Tensor, doc_token_is_html: tf.Tensor
                    ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """Top-level candidates found from the HTML tags, in TF ops.

  A top-level candidate is an outermost `CANDIDATE_TAGS` element: from an
  opening tag at nesting depth 0 to its matching closing tag (or the end of
  the document when unclosed). A document with no such element is one
  candidate spanning all its tokens. Only for inputs without the released
  `long_answer_candidates` (a raw document at serving time); released files
  always use their own candidates.

  Returns:
    <int32>[C] start tokens, <int32>[C] end tokens (exclusive), <bool>[C]
    top-level flags (all True).
  """
  i32 = tf.int32
  n = tf.size(doc_tokens, out_type=i32)
  name = tf.strings.lower(tf.strings.regex_replace(
      doc_tokens, r"^</?([A-Za-z0-9]+).*$", r"\1"))
  is_tag = tf.zeros_like(doc_token_is_html)
  for tag in CANDIDATE_TAGS:
    is_tag |= tf.equal(name, tag)
  is_tag &= doc_token_is_html
  closing = tf.strings.regex_full_match(doc_tokens, "</.*")
  opens = tf.cast(is_tag & ~closing, i32)
  closes = tf.cast(is_tag & closing, i32)
  depth_after = tf.cumsum(opens - closes)
  depth_before = depth_after - opens + closes
  starts = tf.cast(tf.where((opens > 0) & (depth_before <= 0))[:, 0], i32)
  close_at = tf.cast(tf.where((closes > 0) & (depth_after <= 0))[:, 0], i32)
  idx = tf.searchsorted(close_at, starts, side="right")
  padded = tf.concat([close_at + 1, [n]], axis=0)
  ends = tf.gather(padded, tf.minimum(idx, tf.size(close_at)))
  none = tf.equal(tf.size(starts), 0)
  starts = tf.cond(none, lambda: tf.zeros([1], i32), lambda: starts)
  ends = tf.cond(none, lambda: tf.reshape(n, [1]), lambda: ends)
  return starts, ends, tf.ones_like(starts, tf.bool)


# Featurizer statistics (int32 scalars per example).
FEATURIZER_STATS: Tuple[str, ...] = (
    "windows", "question_tokens_dropped", "document_wordpieces",
    "tokens_outside_top_level_candidates", "candidates_without_global_token",
    "windows_global_full")


class NqFeaturizer(featurizing.Featurizer):
  """One NQ document -> all its ETC windows, with TF ops only.

  Example:
    featurizer = NqFeaturizer(vocab_path="vocab.txt", long_seq_len=4096,
                              global_seq_len=230, stride=2048)
    windows = featurizer.featurize(question, doc_tokens, doc_token_is_html,
                                   candidate_starts, candidate_ends,
                                   candidate_top_level)
    windows["token_ids"]  # <int32>[W, 4096]

  A `tf.Module`: an exporter attaches it to the model and calls `featurize`
  inside a serving `tf.function` (a simplified-format `document_text` split
  by `split_document_text` first). Preprocessing runs the same compiled
  function (`record_fn`) through `tf.data`.
  """

  def __init__(self,
               vocab_path: Optional[str] = None,
               spm_model_path: Optional[str] = None,
               *,
               tokenizer: Optional[tokenization.Tokenizer] = None,
               long_seq_len: int = DEFAULT_LONG_SEQ_LEN,
               global_seq_len: int = DEFAULT_GLOBAL_SEQ_LEN,
               stride: int = DEFAULT_STRIDE,
               max_question_len: int = DEFAULT_MAX_QUESTION_LEN,
               token_ids: Optional[NqTokenIds] = None,
               lower_case: bool = True):
    """Builds a featurizer.

    Args:
      vocab_path: a BERT `vocab.txt` (WordPiece).
      spm_model_path: a SentencePiece `.model` (instead of `vocab_path`).
      tokenizer: a ready tokenizer (instead of both paths).
      long_seq_len: L (original 4096).
      global_seq_len: G (original 230).
      stride: window stride in wordpieces (original 2048).
      max_question_len: question wordpieces kept (original 32).
      token_ids: special ids; `NqTokenIds.for_tokenizer` if None.
      lower_case: uncased vocabulary.

    Raises:
      UserInputError: lengths that leave no room for the document or for the
        question's global tokens, or a vocabulary without the special tokens.
    """
    # The segment plan's own limits, checked before the vocabulary is read.
    if max_question_len < 1:
      raise UserInputError(f"max_question_len must be >= 1, got "
                           f"{max_question_len}")
    if long_seq_len < max_question_len + 4:
      raise UserInputError(
          f"long_seq_len {long_seq_len} leaves no document wordpiece after "
          f"[CLS] + {max_question_len} question wordpieces + 2 [SEP]")
    if global_seq_len < max_question_len + 3:
      raise UserInputError(
          f"global_seq_len {global_seq_len} must hold [CLS], "
          f"{max_question_len} + 1 question tokens and a sentence token")
    if not 1 <= stride <= long_seq_len - max_question_len - 3:
      raise UserInputError(
          f"stride {stride} must be in [1, long_seq_len - max_question_len "
          f"- 3 = {long_seq_len - max_question_len - 3}] (no gaps)")
    super().__init__("nq_featurizer", vocab_path, spm_model_path, tokenizer,
                     long_seq_len, global_seq_len, lower_case)
    self.stride = int(stride)
    self.max_question_len = int(max_question_len)
    self.token_ids = token_ids or NqTokenIds.for_tokenizer(self.tokenizer)
    self._record_fn = tf.function(self._featurize, input_signature=[
        tf.TensorSpec([], tf.string, name="question"),
        tf.TensorSpec([None], tf.string, name="doc_tokens"),
        tf.TensorSpec([None], tf.bool, name="doc_token_is_html"),
        tf.TensorSpec([None], tf.int32, name="candidate_starts"),
        tf.TensorSpec([None], tf.int32, name="candidate_ends"),
        tf.TensorSpec([None], tf.bool, name="candidate_top_level"),
        tf.TensorSpec([None], tf.int64, name="doc_token_start_bytes"),
        tf.TensorSpec([None], tf.int64, name="doc_token_end_bytes"),
        tf.TensorSpec([None], tf.int64, name="candidate_start_bytes"),
        tf.TensorSpec([None], tf.int64, name="candidate_end_bytes"),
        tf.TensorSpec([], tf.int64, name="example_id"),
        tf.TensorSpec([], tf.int32, name="answer_type"),
        tf.TensorSpec([2], tf.int32, name="long_span"),
        tf.TensorSpec([2], tf.int32, name="short_span"),
    ])

  def feature_spec(self):
    return feature_spec(self.long_seq_len, self.global_seq_len)

  @property
  def record_fn(self):
    """The compiled function behind `featurize`: 14 positional tensors (see
    `record_inputs`) -> (features [W, ...], `FEATURIZER_STATS` scalars)."""
    return self._record_fn

  # --------------------------------------------------------------- public API
  def featurize(self, question, doc_tokens, doc_token_is_html,
                candidate_starts=None, candidate_ends=None,
                candidate_top_level=None, *, doc_token_start_bytes=None,
                doc_token_end_bytes=None, candidate_start_bytes=None,
                candidate_end_bytes=None, example_id=None, answer_type=None,
                long_span=None, short_span=None) -> Dict[str, tf.Tensor]:
    """All windows of one document: dict of [W, L] / [W, G] / [W] tensors.

    Args:
      question: <string>[] the question.
      doc_tokens: <string>[N] document tokens (`document_tokens[*].token` or
        the space-split `document_text`).
      doc_token_is_html: <bool>[N] HTML tag tokens.
      candidate_starts, candidate_ends: <int32>[C] candidate token spans
        [start, end); None = `html_candidates` (serving a raw document).
      candidate_top_level: <bool>[C]; only top-level candidates' tokens are
        featurized. None = all top-level.
      doc_token_start_bytes, doc_token_end_bytes: <int64>[N]; None = -1.
      candidate_start_bytes, candidate_end_bytes: <int64>[C]; None = -1.
      example_id: <int64>[]; None = 0.
      answer_type: <int32>[] example-level type (`labels_of`); None = -1
        (unlabelled: window labels are -1 / 0).
      long_span, short_span: <int32>[2] [start, end) token spans; None =
        (-1, -1).

    Returns:
      The `feature_spec` features with a leading window dimension W.
    """
    features, _ = self.featurize_with_stats(
        question, doc_tokens, doc_token_is_html, candidate_starts,
        candidate_ends, candidate_top_level,
        doc_token_start_bytes=doc_token_start_bytes,
        doc_token_end_bytes=doc_token_end_bytes,
        candidate_start_bytes=candidate_start_bytes,
        candidate_end_bytes=candidate_end_bytes, example_id=example_id,
        answer_type=answer_type, long_span=long_span, short_span=short_span)
    return features

  def featurize_with_stats(self, question, doc_tokens, doc_token_is_html,
                           candidate_starts=None, candidate_ends=None,
                           candidate_top_level=None, **kwargs):
    """`featurize` plus the int32 `FEATURIZER_STATS` of the document."""
    doc_tokens = tf.convert_to_tensor(doc_tokens, tf.string)
    doc_token_is_html = tf.convert_to_tensor(doc_token_is_html, tf.bool)
    if candidate_starts is None:
      candidate_starts, candidate_ends, candidate_top_level = html_candidates(
          doc_tokens, doc_token_is_html)
    candidate_starts = tf.cast(candidate_starts, tf.int32)
    candidate_ends = tf.cast(candidate_ends, tf.int32)
    if candidate_top_level is None:
      candidate_top_level = tf.ones_like(candidate_starts, tf.bool)
    n = tf.shape(doc_tokens)[:1]
    c = tf.shape(candidate_starts)[:1]

    def value(name, default, shape, dtype):
      v = kwargs.get(name)
      if v is None:
        return tf.fill(shape, tf.constant(default, dtype))
      return tf.cast(tf.convert_to_tensor(v), dtype)

    return self._record_fn(
        tf.reshape(tf.convert_to_tensor(question, tf.string), []),
        doc_tokens, doc_token_is_html, candidate_starts, candidate_ends,
        tf.convert_to_tensor(candidate_top_level, tf.bool),
        value("doc_token_start_bytes", -1, n, tf.int64),
        value("doc_token_end_bytes", -1, n, tf.int64),
        value("candidate_start_bytes", -1, c, tf.int64),
        value("candidate_end_bytes", -1, c, tf.int64),
        tf.reshape(value("example_id", 0, [], tf.int64), []),
        tf.reshape(value("answer_type", -1, [], tf.int32), []),
        tf.reshape(value("long_span", -1, [2], tf.int32), [2]),
        tf.reshape(value("short_span", -1, [2], tf.int32), [2]))

  def featurize_record(self, record, predict_la_when_no_sa: bool = False
                       ) -> Tuple[Dict[str, np.ndarray], Dict[str, int]]:
    """Eager helper: a `data.NqRecord` -> (numpy features [W, ...], stats)."""
    features, stats = self._record_fn(
        *record_inputs(record, predict_la_when_no_sa))
    return ({k: v.numpy() for k, v in features.items()},
            {k: int(v.numpy()) for k, v in stats.items()})

  # ----------------------------------------------------------- implementation
  def _featurize(self, question, doc_tokens, doc_is_html, cand_start,
                 cand_end, cand_top, tok_start_byte, tok_end_byte,
                 cand_start_byte, cand_end_byte, example_id, answer_type,
                 long_span, short_span):
    L, G = self.long_seq_len, self.global_seq_len  # pylint: disable=invalid-name
    i32 = tf.int32

    # --- Question wordpieces, truncated.
    q_all = self.tokenizer.tokenize(tf.reshape(question, [1])).flat_values
    num_q = tf.size(q_all, out_type=i32)
    q = tf.minimum(num_q, self.max_question_len)
    q_ids = tf.cast(q_all[:q], i32)
    pre = q + 2  # [CLS] question [SEP]

    doc_ids, doc_pos, doc_cand, num_kept = self._document_wordpieces(
        doc_tokens, doc_is_html, cand_start, cand_end, cand_top)
    n = tf.size(doc_ids, out_type=i32)

    # --- Window starts: range(0, max(n - doc_len, 0) + stride, stride).
    doc_len = L - pre - 1
    overflow = tf.maximum(n - doc_len, 0)
    num_windows = (overflow + self.stride - 1) // self.stride + 1
    starts = tf.range(num_windows) * self.stride  # [W]
    win_len = tf.clip_by_value(n - starts, 0, doc_len)  # [W]

    def window(args):
      start, size = args
      return self._window(
          q_ids, doc_ids[start:start + size], doc_pos[start:start + size],
          doc_cand[start:start + size], (tok_start_byte, tok_end_byte),
          (cand_start, cand_end, cand_start_byte, cand_end_byte))

    signature = {name: tf.TensorSpec(shape, dtype)
                 for name, (dtype, shape) in SEGMENT_PLAN.spec(L, G).items()}
    features, cand_runs = tf.map_fn(
        window, (starts, win_len),
        fn_output_signature=(signature, tf.TensorSpec([], i32)))
    features[EXAMPLE_ID] = tf.fill([num_windows], example_id)
    features[WINDOW_INDEX] = tf.range(num_windows)
    features[NUM_WINDOWS] = tf.fill([num_windows], num_windows)
    features.update(_window_labels(features[DOC_TOKEN_MAP], L, answer_type,
                                   long_span, short_span))
    spec = self.feature_spec()
    for name, value in features.items():
      value.set_shape([None, *spec[name][1]])
    lost = tf.maximum(cand_runs - (G - pre), 0)
    stats = {
        "windows": num_windows,
        "question_tokens_dropped": num_q - q,
        "document_wordpieces": n,
        "tokens_outside_top_level_candidates": tf.size(
            doc_tokens, out_type=i32) - num_kept,
        "candidates_without_global_token": tf.reduce_sum(lost),
        "windows_global_full": tf.reduce_sum(tf.cast(lost > 0, i32)),
    }
    return features, stats

  def _document_wordpieces(self, doc_tokens, doc_is_html, cand_start,
                           cand_end, cand_top
                           ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor,
                                      tf.Tensor]:
    """The wordpieces of the document tokens inside top-level candidates,
    in document order; an HTML tag is one special id.

    Returns:
      <int32>[n] the ids, <int32>[n] the document token and <int32>[n] the
      top-level candidate of each, and <int32>[] the number of kept tokens.
    """
    ids = self.token_ids
    i32 = tf.int32
    num_tokens = tf.size(doc_tokens, out_type=i32)
    # Each document token's top-level candidate (-1: dropped).
    top_idx = tf.cast(tf.where(cand_top)[:, 0], i32)
    top_start = tf.clip_by_value(tf.gather(cand_start, top_idx), 0,
                                 num_tokens)
    top_end = tf.clip_by_value(tf.gather(cand_end, top_idx), top_start,
                               num_tokens)
    spans = tf.ragged.range(top_start, top_end)
    token_cand = tf.tensor_scatter_nd_max(
        tf.fill([num_tokens], -1), spans.flat_values[:, tf.newaxis],
        tf.repeat(top_idx, tf.cast(spans.row_lengths(), i32)))
    kept = tf.cast(tf.where(token_cand >= 0)[:, 0], i32)  # doc order

    kept_html = tf.gather(doc_is_html, kept)
    kept_text = tf.where(kept_html, "", tf.gather(doc_tokens, kept))
    pieces = self.tokenizer.tokenize(kept_text)
    # A closing tag is a token that starts with "</" (the original's
    # `startswith`; a regex "</.*" would miss a tag holding a line break).
    closing = tf.equal(
        tf.strings.substr(tf.gather(doc_tokens, kept), 0, 2), "</")
    special = tf.RaggedTensor.from_row_lengths(
        tf.boolean_mask(tf.where(closing, ids.html_end, ids.html_start),
                        kept_html),
        tf.cast(kept_html, pieces.row_splits.dtype))
    pieces = tf.concat([tf.cast(pieces, i32), special], axis=1)
    doc_pos = tf.repeat(kept, tf.cast(pieces.row_lengths(), i32))  # [n]
    return (pieces.flat_values, doc_pos, tf.gather(token_cand, doc_pos),
            tf.size(kept, out_type=i32))

  def _window(self, q_ids: tf.Tensor, ids_: tf.Tensor, pos: tf.Tensor,
              cand: tf.Tensor, token_bytes: Tuple[tf.Tensor, tf.Tensor],
              candidates: Tuple[tf.Tensor, ...]
              ) -> Tuple[Dict[str, tf.Tensor], tf.Tensor]:
    """One window's `SEGMENT_PLAN` features and <int32>[] its candidate runs.

    Long: `[CLS] question [SEP] window [SEP]`. Global: [CLS], a question
    token per question wordpiece, then one token per run of equal
    candidates over `[SEP] window [SEP]`: the question's [SEP] opens the
    first (a question token), each candidate's wordpieces one
    (`global_sentence`), the final [SEP] the last (`global_trailing`; after
    an empty window it stays in the question [SEP]'s run).

    Args:
      q_ids: <int32>[q] the question's wordpieces.
      ids_, pos, cand: <int32>[w] the window's wordpieces, their document
        tokens and their top-level candidates.
      token_bytes: <int64>[N] start and end bytes of the document tokens.
      candidates: the candidates' start and end tokens <int32>[C] and bytes
        <int64>[C].
    """
    ids = self.token_ids
    i32 = tf.int32
    cand = tf.concat([[-1], cand, [-1]], axis=0)  # [SEP] window [SEP]
    run = tf.cumsum(tf.cast(tf.concat(
        [[True], tf.not_equal(cand[1:], cand[:-1])], axis=0), i32)) - 1
    num_runs = run[-1] + 1
    run_cand = tf.math.unsorted_segment_max(cand, run, num_runs)
    is_cand = run_cand >= 0
    # Long position of each run's first and last wordpiece.
    local = tf.range(tf.size(run)) + 1 + tf.size(q_ids)
    first = tf.math.unsorted_segment_min(local, run, num_runs)
    last = tf.math.unsorted_segment_max(local, run, num_runs)

    def cand_value(values):
      none = tf.constant(-1, values.dtype)
      padded = tf.concat([values, [none]], 0)  # C = 0 safe
      return tf.where(is_cand, tf.gather(padded, tf.maximum(run_cand, 0)),
                      none)

    def with_seps(values):
      none = tf.constant([-1], values.dtype)
      return tf.concat([none, values, none], 0)

    run_ids = tf.where(tf.range(num_runs) == 0, ids.global_question,
                       tf.where(is_cand, ids.global_sentence,
                                ids.global_trailing))
    start_byte, end_byte = token_bytes
    return SEGMENT_PLAN.build([
        segments.Segment([ids.cls], [ids.global_cls], sentence_ids=[0]),
        segments.per_token(q_ids, ids.global_question),
        segments.grouped(
            tf.concat([[ids.sep], ids_, [ids.sep]], 0), run, num_runs,
            run_ids,
            long_features={
                DOC_TOKEN_MAP: with_seps(pos),
                LONG_CANDIDATE_INDEX: cand,
                LONG_START_BYTE: with_seps(tf.gather(start_byte, pos)),
                LONG_END_BYTE: with_seps(tf.gather(end_byte, pos))},
            global_features={
                GLOBAL_CANDIDATE_INDEX: run_cand,
                GLOBAL_CANDIDATE_LONG_START: tf.where(is_cand, first, -1),
                GLOBAL_CANDIDATE_LONG_END: tf.where(is_cand, last, -1),
                **dict(zip((GLOBAL_CANDIDATE_DOC_START,
                            GLOBAL_CANDIDATE_DOC_END,
                            GLOBAL_CANDIDATE_START_BYTE,
                            GLOBAL_CANDIDATE_END_BYTE),
                           map(cand_value, candidates)))}),
    ], self.long_seq_len, self.global_seq_len), tf.reduce_sum(
        tf.cast(is_cand, i32))


def _window_labels(doc_token_map: tf.Tensor, long_len: int,
                   answer_type: tf.Tensor, long_span: tf.Tensor,
                   short_span: tf.Tensor) -> Dict[str, tf.Tensor]:
  """The `LABEL_FEATURES` of each window, as the original: a span's start
  and end are looked up in each window independently, so a span cut by a
  window edge keeps the end that the window holds (the other one points at
  [CLS]).

  Args:
    doc_token_map: <int32>[W, L] each position's document token (-1 none).
    long_len: L.
    answer_type: <int32>[] the example's (`data.ANSWER_TYPES`; -1 unknown).
    long_span, short_span: <int32>[2] [start, end) document token spans.
  """
  p = tf.range(long_len)[tf.newaxis, :]  # [1, L]
  has_pos = doc_token_map >= 0

  def first_position(token: tf.Tensor) -> tf.Tensor:
    # First wordpiece of `token` in the window; 0 when it has none there.
    match = tf.equal(doc_token_map, token) & has_pos
    first = tf.reduce_min(tf.where(match, p, long_len), axis=1)
    return tf.where(first < long_len, first, 0)

  def last_position(token: tf.Tensor) -> tf.Tensor:
    # Last wordpiece of `token` in the window; 0 when it has none there.
    match = tf.equal(doc_token_map, token) & has_pos
    return tf.maximum(tf.reduce_max(tf.where(match, p, -1), axis=1), 0)

  # Spans are [start, end): the last token is end - 1.
  long_start = first_position(long_span[0])
  long_end = last_position(long_span[1] - 1)
  short_start = first_position(short_span[0])
  short_end = last_position(short_span[1] - 1)
  # Only an example's own answer kind decides: a short (long) example is
  # null in a window that holds neither end of its short (long) span;
  # yes / no examples keep their type everywhere.
  short_gone = tf.equal(short_start, 0) & tf.equal(short_end, 0)
  long_gone = tf.equal(long_start, 0) & tf.equal(long_end, 0)
  window_type = tf.fill(tf.shape(long_start), answer_type)
  window_type = tf.where(
      ((window_type == data.SHORT) & short_gone) |
      ((window_type == data.LONG) & long_gone), data.NULL, window_type)
  return dict(zip(LABEL_FEATURES, (window_type, long_start, long_end,
                                   short_start, short_end)))


def record_inputs(record: data.NqRecord,
                  predict_la_when_no_sa: bool = False
                  ) -> Tuple[tf.Tensor, ...]:
  """The 14 `NqFeaturizer.record_fn` inputs for a `data.NqRecord`."""
  labels = data.labels_of(record, predict_la_when_no_sa)
  spans = [c.span for c in record.candidates]

  def vector(values, dtype):
    values = list(values)
    return tf.constant(values, dtype, shape=[len(values)])

  return (
      tf.constant(record.question, tf.string),
      vector(record.tokens, tf.string),
      vector(record.token_is_html, tf.bool),
      vector([s.start_token for s in spans], tf.int32),
      vector([s.end_token for s in spans], tf.int32),
      vector([c.top_level for c in record.candidates], tf.bool),
      vector(record.token_start_byte, tf.int64),
      vector(record.token_end_byte, tf.int64),
      vector([s.start_byte for s in spans], tf.int64),
      vector([s.end_byte for s in spans], tf.int64),
      tf.constant(record.example_id, tf.int64),
      tf.constant(labels.answer_type, tf.int32),
      tf.constant(labels.long_span, tf.int32),
      tf.constant(labels.short_span, tf.int32),
  )
