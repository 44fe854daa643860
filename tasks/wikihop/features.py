"""WikiHop featurization: raw record strings -> ETC raw features, in TF ops.

One code path serves preprocessing (through `tf.data`, see `preprocess.py`) and
serving (inside a `tf.function` / SavedModel signature): everything after
sentence splitting is TensorFlow ops, with unknown numbers of candidates,
supports and sentences. Supports are split into sentences as the original, by
NLTK's Punkt (`tasks.common.featurization.sentences`), in Python, before the
graph: `split_supports` gives the graph's `sentences` and `num_sentences`
inputs, in preprocessing and for a client of the raw serving signature alike.

Segments (as the original ETC WikiHop preprocessing):

  global: [one token per candidate][one per query wordpiece]
          [paragraph token, one token per sentence] per kept document, padding
  long:   [candidate wordpieces][query wordpieces][document wordpieces],
          padding

- `long_sentence_ids[i]` is the global index of the token that long token `i`
  belongs to: its candidate token, its query-wordpiece token, or its
  sentence token. Padding: -1.
- `long_paragraph_ids[i]` is the global index of the paragraph token of a
  document token's document; -1 for candidate/query tokens and padding.
- `long_paragraph_breakpoints` is 1 at the last token of each candidate, of
  the query and of each document; `global_paragraph_breakpoints` is 1 at each
  candidate token, at the last query token, and at the last token of each
  document (paragraph token + its sentence tokens). The side-input code
  derives masks from these (padding = after the last breakpoint).
- `l2g_linked_ids[i]` = candidate index c (= its global index) when long
  token i is part of a mention of candidate c (its own wordpieces at the start
  of the long input, or, as the original, an exact wordpiece-sequence match
  inside one document sentence whose lower-cased text contains the
  lower-cased candidate as a substring; a later candidate wins overlaps);
  else -1.
- With `mark_query_subject` (off by default, as the original), document
  tokens of an exact wordpiece-sequence match of the query's subject (the
  query after its first, relation, word: "country_of tamoli" -> "tamoli")
  within one sentence get token type 2 instead of 1, so that the model is
  told where the question's entity is, as it is told where the candidates
  are. The demo uses it (`demos/wikihop/demo.py`; docs/wikihop_demo.md,
  "The query's subject typed (mark_query_subject)").
- `ignore_hard_g2l_mask` is 1 on candidate and query global tokens (they see
  the whole long input even with hard g2l masking), as the original WikiHop
  model; the original passes no `ignore_hard_l2g_mask`, so none is emitted.

Truncation keeps the candidates and the query (query wordpieces are cut only
if the candidates leave no room) and drops document sentences from the end of
the documents with the most sentences first, until the long tokens fit
`long_seq_len` and the global tokens (counting one paragraph token per
document that still has a sentence) fit `global_seq_len`. The order is the
original's max-heap order in closed form: by position in the document
(last first), then by the document's original sentence count (fewer first),
then by document index. Every document keeps its paragraph token, also one
without sentences (empty, or emptied by truncation), as the original.
`max_num_sentences` (original: 200) optionally caps the total number of
sentences as well.
"""

import dataclasses
from typing import ClassVar, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from etc_realformer.export import batching
from etc_realformer.features import feature_names
from tasks.common.featurization import featurizing
from tasks.common.featurization import segments
from tasks.common.featurization import sentences as sentences_lib
from tasks.common.featurization import tokenization

# Token type ids (segment ids), shared by long and global inputs (16 rows).
GLOBAL_TOKEN_TYPE_ID = 0  # sentence global tokens and padding
SENTENCE_TOKEN_TYPE_ID = 1  # long document tokens
# Document tokens of a mention of the query's subject, with
# `mark_query_subject` only (an option of this project, not the original's).
QUERY_SUBJECT_TOKEN_TYPE_ID = 2
QUESTION_TOKEN_TYPE_ID = 3  # long query tokens
CANDIDATE_TOKEN_TYPE_ID = 4  # long candidate tokens
QUESTION_GLOBAL_TOKEN_TYPE_ID = 5
CANDIDATE_GLOBAL_TOKEN_TYPE_ID = 6
PARAGRAPH_GLOBAL_TOKEN_TYPE_ID = 7


@dataclasses.dataclass(frozen=True)
class GlobalTokenIds(featurizing.SpecialTokenIds):
  """Vocabulary ids used for the special global tokens.

  The defaults are the original's: in a BERT vocabulary [unused0],
  [unused2], [unused3], [unused4]; in ETC's SentencePiece vocabulary "</s>"
  (the pre-training sentence token), "<unused_40>", "<unused_41>",
  "<unused_42>".
  """
  sentence: int
  question: int
  candidate: int
  paragraph: int

  WORDPIECE: ClassVar = dict(sentence=1, question=3, candidate=4,
                             paragraph=5)
  SENTENCEPIECE: ClassVar = dict(sentence=1, question=41, candidate=42,
                                 paragraph=43)


CANDIDATE_MASK = "candidate_mask"
LABEL = "label"
NUM_CANDIDATES = "num_candidates"
EXAMPLE_ID = "example_id"
CANDIDATES = "candidates"

# The long and global features: the multihop side-input source, the
# candidates' mentions and the candidate tokens (the answer's support).
SEGMENT_PLAN = segments.SegmentPlan(
    segments.MULTIHOP,
    long_features=(segments.Feature(feature_names.L2G_LINKED_IDS, -1,
                                    global_index=True),),
    global_features=(segments.Feature(feature_names.IGNORE_HARD_G2L_MASK),
                     segments.Feature(CANDIDATE_MASK)))
# The int32 features the model (with the side-input code) consumes.
MODEL_FEATURES: Tuple[str, ...] = SEGMENT_PLAN.model_features
# Truncation amounts returned by `featurize_with_stats`.
TRUNCATION_STATS: Tuple[str, ...] = (
    "sentences_dropped", "docs_emptied", "doc_tokens_dropped",
    "query_tokens_dropped")


def feature_spec(
    long_seq_len: int = 4096, global_seq_len: int = 430
) -> Dict[str, Tuple[tf.DType, Tuple[Optional[int], ...]]]:
  """The WikiHop features: name -> (dtype, shape), per example (unbatched).

  L = long_seq_len, G = global_seq_len.

  token_ids [L]: long wordpiece ids; 0 = padding.
  segment_ids [L]: long token types (4 candidate, 3 query, 1 document, 2
    document mention of the query subject with `mark_query_subject`, 0 pad).
  long_paragraph_breakpoints [L]: 1 at the last token of each candidate, of
    the query and of each document.
  long_paragraph_ids [L]: global index of the document's paragraph token; -1
    for candidate/query tokens and padding.
  long_sentence_ids [L]: global index of the token's candidate / query
    wordpiece / sentence global token; -1 for padding.
  l2g_linked_ids [L]: candidate index of a candidate mention, else -1.
  global_token_ids [G]: special ids (see `GlobalTokenIds`); 0 = padding.
  global_segment_ids [G]: 6 candidate, 5 query, 7 paragraph, 0 sentence/pad.
  global_paragraph_breakpoints [G]: 1 at each candidate, the last query token
    and the last token of each document.
  ignore_hard_g2l_mask [G]: 1 on candidate and query global tokens.
  candidate_mask [G]: 1 on candidate global tokens (the softmax support).
  label []: global index of the answer's candidate token (= its index in
    `candidates`); -1 when unknown (serving).
  num_candidates []: number of candidates.
  example_id []: the record id.
  candidates [None]: the normalized candidate strings, for decoding.
  """
  spec = SEGMENT_PLAN.spec(long_seq_len, global_seq_len)
  spec.update({
      LABEL: (tf.int32, ()),
      NUM_CANDIDATES: (tf.int32, ()),
      EXAMPLE_ID: (tf.string, ()),
      CANDIDATES: (tf.string, (None,)),
  })
  return spec


def split_supports(supports) -> Tuple[List[str], List[int]]:
  """Supports -> (sentences [S], num_sentences [D]), split as the original
  (`nltk.sent_tokenize`; see `tasks.common.featurization.sentences`).

  Args:
    supports: [D] documents: Python strings, bytes, or an eager string
      tensor / array.
  """
  if tf.is_symbolic_tensor(supports):
    raise TypeError(
        "split_supports needs the supports' values (Punkt runs in Python): "
        "split them before the graph and call featurize")
  if isinstance(supports, (tf.Tensor, np.ndarray)):
    supports = np.asarray(supports).tolist()
  texts = [s.decode("utf-8") if isinstance(s, bytes) else s
           for s in supports]
  return sentences_lib.split_documents(texts)


class WikiHopFeaturizer(featurizing.Featurizer):
  """Raw WikiHop record strings -> ETC raw features, in TF ops.

  Example:
    featurizer = WikiHopFeaturizer(vocab_path="vocab.txt",
                                   long_seq_len=4096, global_seq_len=430)
    features = featurizer.featurize(query, candidates,
                                    *split_supports(supports))

  The featurizer is a `tf.Module`: an exporter can attach it to the model and
  call `featurize` / `featurize_batch` inside a serving `tf.function`.
  """

  def __init__(self,
               vocab_path: Optional[str] = None,
               spm_model_path: Optional[str] = None,
               *,
               tokenizer: Optional[tokenization.Tokenizer] = None,
               long_seq_len: int = 4096,
               global_seq_len: int = 430,
               global_token_ids: Optional[GlobalTokenIds] = None,
               max_num_sentences: Optional[int] = None,
               lower_case: bool = True,
               mark_query_subject: bool = False):
    """Builds a featurizer.

    Args:
      vocab_path, spm_model_path, tokenizer, lower_case: the vocabulary
        (`featurizing.Featurizer`).
      long_seq_len: L, the long input length.
      global_seq_len: G, the global input length.
      global_token_ids: special global token ids;
        `GlobalTokenIds.for_tokenizer` when None.
      max_num_sentences: optional cap on the total number of document
        sentences (the original used 200 with G = 430).
      mark_query_subject: give the document mentions of the query's subject
        token type 2 (see the module docstring).
    """
    super().__init__("wikihop_featurizer", vocab_path, spm_model_path,
                     tokenizer, long_seq_len, global_seq_len, lower_case)
    self.global_token_ids = (global_token_ids or
                             GlobalTokenIds.for_tokenizer(self.tokenizer))
    self.max_num_sentences = max_num_sentences
    self.mark_query_subject = bool(mark_query_subject)
    self._record_fn = tf.function(
        self._featurize_with_stats,
        input_signature=[
            tf.TensorSpec([], tf.string),
            tf.TensorSpec([None], tf.string),
            tf.TensorSpec([None], tf.string),
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([], tf.string),
            tf.TensorSpec([], tf.string),
        ])

  def feature_spec(self):
    return feature_spec(self.long_seq_len, self.global_seq_len)

  # --------------------------------------------------------------- public API
  def featurize(self,
                             query: tf.Tensor,
                             candidates: tf.Tensor,
                             sentences: tf.Tensor,
                             num_sentences: tf.Tensor,
                             answer: Optional[tf.Tensor] = None,
                             example_id: Optional[tf.Tensor] = None
                             ) -> Dict[str, tf.Tensor]:
    """One record's features (see `feature_spec`), in TF ops.

    Args:
      query: <string>[] the query, e.g. "country_of_citizenship john doe".
      candidates: <string>[C] candidate answers (C unknown until run time).
      sentences: <string>[S] the supports' sentences, all documents'
        concatenated (`split_supports`).
      num_sentences: <int32>[D] sentences per support document (sums to S).
      answer: <string>[] the answer; None gives `label` -1.
      example_id: <string>[] the record id; "" when None.

    Returns:
      Dict of the `feature_spec` tensors (fixed shapes [L], [G], []).
    """
    features, _ = self.featurize_with_stats(
        query, candidates, sentences, num_sentences, answer, example_id)
    return features

  def featurize_with_stats(
      self, query, candidates, sentences, num_sentences, answer=None,
      example_id=None
  ) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor]]:
    """`featurize` plus <int32>[] truncation stats and
    `overflow`.

    `overflow` is 1 when the candidates alone do not fit (more candidates
    than global tokens, or more candidate wordpieces than long tokens); the
    features are then cropped and not faithful to the record.
    """
    has_answer = answer is not None
    answer = tf.constant("") if answer is None else answer
    example_id = tf.constant("") if example_id is None else example_id
    features, stats = self._featurize_with_stats(
        tf.convert_to_tensor(query, tf.string),
        tf.convert_to_tensor(candidates, tf.string),
        tf.convert_to_tensor(sentences, tf.string),
        tf.cast(num_sentences, tf.int32),
        tf.convert_to_tensor(answer, tf.string),
        tf.convert_to_tensor(example_id, tf.string))
    if not has_answer:
      features[LABEL] = tf.constant(-1, tf.int32)
    return features, stats

  def input_checks(self, signature: str, query: tf.Tensor,
                   candidates: tf.Tensor, sentences: tf.Tensor,
                   num_sentences: tf.Tensor,
                   record: Optional[tf.Tensor] = None
                   ) -> List[tf.Operation]:
    """Assertions that one served record can be answered whole.

    Preprocessing skips a record whose candidates do not fit (`overflow`:
    more candidates than global tokens, or more candidate wordpieces than
    long tokens) as `too_long`; served, it would be answered from the
    candidates that fit, and so would a record whose sentence counts
    disagree with its sentences. A failed check fails the request with an
    `InvalidArgumentError` naming the signature, the input, the record
    and the numbers.

    Args:
      signature: the signature's name, for the messages.
      query, candidates, sentences, num_sentences: as
        `featurize`.
      record: <int32>[] the record's index in a batch (named in the
        messages), or None for a one-record signature.
    """
    L, G = self.long_seq_len, self.global_seq_len  # pylint: disable=invalid-name
    where = [] if record is None else ["record", record]
    num_cands = tf.size(candidates, out_type=tf.int32)
    cand_tokens = tf.size(
        self.tokenizer.tokenize(tf.strings.lower(
            tf.strings.strip(candidates), encoding="utf-8")).flat_values,
        out_type=tf.int32)
    num_sentences = tf.cast(num_sentences, tf.int32)
    checks = []
    for name, texts in (("query", query), ("candidates", candidates),
                        ("sentences", sentences)):
      checks += batching.valid_utf8(signature, name, texts, where)
    checks += [
        tf.debugging.Assert(num_cands > 0, [
            f"{signature}: `candidates` is empty; a record needs at least "
            f"one candidate", *where]),
        tf.debugging.Assert(num_cands <= G, [
            f"{signature}: more `candidates` than the global input holds: "
            f"the answer would be chosen among the first {G} only", *where,
            "candidates", num_cands, "limit (global_seq_len)", G]),
        tf.debugging.Assert(cand_tokens <= L, [
            f"{signature}: the `candidates`' wordpieces do not fit the long "
            f"input", *where, "wordpieces", cand_tokens,
            "limit (long_seq_len)", L]),
        tf.debugging.Assert(tf.reduce_all(num_sentences >= 0), [
            f"{signature}: `num_sentences` must be >= 0", *where,
            "num_sentences", num_sentences]),
        tf.debugging.Assert(
            tf.equal(tf.reduce_sum(num_sentences),
                     tf.size(sentences, out_type=tf.int32)),
            [f"{signature}: the sum of `num_sentences` must equal the number "
             f"of `sentences`", *where, "sum", tf.reduce_sum(num_sentences),
             "sentences", tf.size(sentences, out_type=tf.int32)]),
    ]
    return checks

  def featurize_batch(self, query: tf.Tensor,
                         candidates: tf.RaggedTensor,
                         sentences: tf.RaggedTensor,
                         num_sentences: tf.RaggedTensor
                         ) -> Dict[str, tf.Tensor]:
    """A batch of records (serving): [B] queries, [B, (C)] candidates,
    [B, (S)] sentences and <int32>[B, (D)] sentences per support.

    Returns the fixed-shape features with a leading batch dimension;
    `candidates` comes back as <string>[B, (C)] ragged.
    """
    spec = self.feature_spec()

    def one(args):
      q, c, s, n = args
      f = self.featurize(q, c, s, n)
      f[CANDIDATES] = tf.RaggedTensor.from_tensor(f[CANDIDATES][None])[0]
      return f

    signature = {
        name: tf.TensorSpec(shape, dtype)
        for name, (dtype, shape) in spec.items() if name != CANDIDATES
    }
    signature[CANDIDATES] = tf.RaggedTensorSpec([None], tf.string)
    return tf.map_fn(one, (query, candidates, sentences,
                           tf.cast(num_sentences, tf.int32)),
                     fn_output_signature=signature)

  def featurize_record(self, record) -> Tuple[Dict[str, np.ndarray],
                                              Dict[str, int]]:
    """Eager helper: a `data.WikiHopRecord` -> numpy features and stats."""
    sentences, num_sentences = split_supports(record.supports)
    features, stats = self._record_fn(
        tf.constant(record.query), tf.constant(record.candidates, tf.string),
        tf.constant(sentences, tf.string),
        tf.constant(num_sentences, tf.int32), tf.constant(record.answer),
        tf.constant(record.id))
    return ({k: v.numpy() for k, v in features.items()},
            {k: int(v.numpy()) for k, v in stats.items()})

  @property
  def record_fn(self):
    """The compiled per-record function (query, candidates, sentences,
    num_sentences, answer, example_id) -> (features, stats), for `tf.data`
    pipelines."""
    return self._record_fn

  # ----------------------------------------------------------- implementation
  def _featurize_with_stats(self, query, candidates, sentences, num_sentences,
                            answer, example_id):
    L, G = self.long_seq_len, self.global_seq_len  # pylint: disable=invalid-name
    ids = self.global_token_ids
    i32 = tf.int32

    # --- Tokenize candidates (normalized as the answer), query, sentences.
    candidates = tf.strings.lower(tf.strings.strip(candidates),
                                  encoding="utf-8")
    num_cands = tf.size(candidates, out_type=i32)
    cand_tokens = self.tokenizer.tokenize(candidates)  # [C, (n_c)]
    cand_row = tf.cast(cand_tokens.value_rowids(), i32)  # [Tc]
    num_cand_tokens = tf.size(cand_row, out_type=i32)
    query_tokens = self.tokenizer.tokenize(tf.reshape(query, [1])).flat_values
    num_query_tokens = tf.size(query_tokens, out_type=i32)
    sentences = tf.RaggedTensor.from_row_lengths(
        sentences, tf.cast(num_sentences, tf.int64))  # [D, (S_d)]
    sent_tokens = self.tokenizer.tokenize(sentences.flat_values)  # [S, (T_s)]
    sent_lens = tf.cast(sent_tokens.row_lengths(), i32)

    # --- Budgets. Candidates are kept whole; the query yields only to them.
    overflow = tf.logical_or(num_cands > G, num_cand_tokens > L)
    query_keep = tf.clip_by_value(
        tf.minimum(G - num_cands, L - num_cand_tokens), 0, num_query_tokens)
    keep_sent = _kept_sentences(
        sentences, sent_lens, G - num_cands - query_keep,
        L - num_cand_tokens - query_keep, self.max_num_sentences)
    kept_per_doc = tf.reduce_sum(tf.cast(
        tf.RaggedTensor.from_row_splits(keep_sent, sentences.row_splits),
        i32), axis=1)  # [D]

    features = SEGMENT_PLAN.build([
        # Candidates: one global token each, shared by its wordpieces.
        segments.grouped(
            cand_tokens.flat_values, cand_row, num_cands, ids.candidate,
            CANDIDATE_TOKEN_TYPE_ID, CANDIDATE_GLOBAL_TOKEN_TYPE_ID,
            long_features={feature_names.L2G_LINKED_IDS: cand_row},
            global_features={feature_names.IGNORE_HARD_G2L_MASK: 1,
                             CANDIDATE_MASK: 1}),
        # The kept query wordpieces: each is its own "sentence".
        segments.per_token(
            query_tokens[:query_keep], ids.question, QUESTION_TOKEN_TYPE_ID,
            QUESTION_GLOBAL_TOKEN_TYPE_ID,
            global_features={feature_names.IGNORE_HARD_G2L_MASK: 1}),
        self._documents(query, candidates, cand_tokens, sentences,
                        sent_tokens, keep_sent, kept_per_doc),
    ], L, G)

    # --- Label: first candidate equal to the normalized answer.
    answer = tf.strings.lower(tf.strings.strip(answer), encoding="utf-8")
    answer_hits = tf.cast(tf.where(tf.equal(candidates, answer))[:, 0], i32)
    label = tf.cond(tf.size(answer_hits) > 0, lambda: answer_hits[0],
                    lambda: tf.constant(-1, i32))
    # Only matters on overflow, where the global input is cropped.
    features[LABEL] = tf.where(label < G, label, -1)
    features[NUM_CANDIDATES] = num_cands
    features[EXAMPLE_ID] = tf.reshape(example_id, [])
    features[CANDIDATES] = candidates
    stats = {
        "sentences_dropped": tf.size(keep_sent, out_type=i32) -
                             tf.reduce_sum(tf.cast(keep_sent, i32)),
        "docs_emptied": tf.reduce_sum(tf.cast(
            (sentences.row_lengths() > 0) & (kept_per_doc == 0), i32)),
        "doc_tokens_dropped": tf.reduce_sum(
            tf.boolean_mask(sent_lens, ~keep_sent)),
        "query_tokens_dropped": num_query_tokens - query_keep,
        "overflow": tf.cast(overflow, i32),
    }
    return features, stats

  def _documents(self, query: tf.Tensor, candidates: tf.Tensor,
                 cand_tokens: tf.RaggedTensor, sentences: tf.RaggedTensor,
                 sent_tokens: tf.RaggedTensor, keep_sent: tf.Tensor,
                 kept_per_doc: tf.Tensor) -> segments.Segment:
    """The documents' segment: per document its paragraph token, then one
    global token per kept sentence, over the kept sentences' wordpieces.

    Args:
      query: <string>[] the query (its subject, with `mark_query_subject`).
      candidates: <string>[C] the normalized candidates.
      cand_tokens: <int32>[C, (n_c)] their wordpieces.
      sentences: <string>[D, (S_d)] the documents' sentences.
      sent_tokens: <int32>[S, (T_s)] their wordpieces.
      keep_sent: <bool>[S] the kept sentences (a prefix of each document).
      kept_per_doc: <int32>[D] their number per document.
    """
    ids = self.global_token_ids
    i32 = tf.int32
    sent_doc = tf.cast(sentences.value_rowids(), i32)  # [S]
    sent_pos = (tf.range(tf.size(sent_doc, out_type=i32)) -
                tf.gather(tf.cast(sentences.row_starts(), i32), sent_doc))
    doc_global_len = 1 + kept_per_doc  # [D]
    doc_offset = tf.cumsum(doc_global_len, exclusive=True)  # paragraph token
    global_doc = tf.repeat(tf.range(tf.size(doc_global_len)), doc_global_len)
    is_paragraph = tf.equal(tf.range(tf.size(global_doc, out_type=i32)),
                            tf.gather(doc_offset, global_doc))

    token_sent = tf.cast(sent_tokens.value_rowids(), i32)  # [T_all]
    token_keep = tf.gather(keep_sent, token_sent)
    doc_tokens = tf.boolean_mask(sent_tokens.flat_values, token_keep)  # [T]
    doc_token_sent = tf.boolean_mask(token_sent, token_keep)
    doc_token_doc = tf.gather(sent_doc, doc_token_sent)
    doc_token_sent_id = tf.gather(
        tf.gather(doc_offset, sent_doc) + 1 + sent_pos, doc_token_sent)

    # As the original, a candidate is looked for in a sentence only when
    # the sentence's lower-cased text contains the lower-cased candidate.
    cand_in_sentence = _contains(
        tf.strings.lower(sentences.flat_values, encoding="utf-8"),
        candidates)  # [C, S]
    linked = self._link_mentions(
        cand_tokens, tf.cast(cand_tokens.row_lengths(), i32), doc_tokens,
        doc_token_sent_id, tf.gather(cand_in_sentence, doc_token_sent,
                                     axis=1))
    segment_ids = tf.fill([tf.size(doc_tokens)], SENTENCE_TOKEN_TYPE_ID)
    if self.mark_query_subject:
      # The subject is matched like a candidate: one more "candidate" whose
      # mentions are found by the same exact-match code.
      subject = tf.strings.regex_replace(
          tf.strings.strip(query), r"^\S*\s*", "")
      subject_tokens = self.tokenizer.tokenize(tf.reshape(subject, [1]))
      subject_linked = self._link_mentions(
          subject_tokens, tf.cast(subject_tokens.row_lengths(), i32),
          doc_tokens, doc_token_sent_id)
      segment_ids = tf.where(subject_linked >= 0,
                             QUERY_SUBJECT_TOKEN_TYPE_ID, segment_ids)
    return segments.Segment(
        token_ids=doc_tokens,
        global_token_ids=tf.where(is_paragraph, ids.paragraph, ids.sentence),
        sentence_ids=doc_token_sent_id,
        segment_ids=segment_ids,
        global_segment_ids=tf.where(is_paragraph,
                                    PARAGRAPH_GLOBAL_TOKEN_TYPE_ID,
                                    GLOBAL_TOKEN_TYPE_ID),
        paragraph_ids=tf.gather(doc_offset, doc_token_doc),
        long_paragraphs=doc_token_doc,
        global_paragraphs=global_doc,
        long_features={feature_names.L2G_LINKED_IDS: linked})

  def _link_mentions(self, cand_tokens: tf.RaggedTensor, cand_lens: tf.Tensor,
                     doc_tokens: tf.Tensor, doc_token_sent_id: tf.Tensor,
                     may_start: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Candidate index per document token when it is part of a mention.

    A mention is an exact match of a candidate's wordpiece sequence that
    stays within one sentence. Later candidates win overlaps (as the
    original, which links candidates in order, overwriting).

    Args:
      cand_tokens: <int32>[C, (n_c)] candidate wordpieces.
      cand_lens: <int32>[C] n_c.
      doc_tokens: <int32>[T] kept document wordpieces.
      doc_token_sent_id: <int32>[T] sentence (global index) of each.
      may_start: optional <bool>[C, T]: where a mention of each candidate may
        start (all tokens when None).

    Returns:
      <int32>[T] candidate index or -1.
    """
    i32 = tf.int32
    cand_pad = cand_tokens.to_tensor(default_value=-1)  # [C, K]
    num_cands = tf.shape(cand_pad)[0]
    max_len = tf.shape(cand_pad)[1]
    num_tokens = tf.size(doc_tokens, out_type=i32)
    offsets = tf.range(max_len)  # j
    # A sentinel at index T ends every window that runs off the end.
    tokens_ext = tf.concat([doc_tokens, [-2]], axis=0)
    sent_ext = tf.concat([doc_token_sent_id, [-3]], axis=0)
    window = tf.minimum(tf.range(num_tokens)[:, tf.newaxis] + offsets,
                        num_tokens)  # [T, K]
    window_tokens = tf.gather(tokens_ext, window)
    same_sentence = tf.equal(tf.gather(sent_ext, window),
                             doc_token_sent_id[:, tf.newaxis])  # [T, K]
    needed = offsets[tf.newaxis, :] < cand_lens[:, tf.newaxis]  # [C, K]
    agrees = (tf.equal(window_tokens[tf.newaxis], cand_pad[:, tf.newaxis]) &
              same_sentence[tf.newaxis])  # [C, T, K]
    starts = tf.reduce_all(agrees | ~needed[:, tf.newaxis], axis=-1)
    starts &= (cand_lens > 0)[:, tf.newaxis]  # [C, T]
    if may_start is not None:
      starts &= may_start
    # Token p is covered by a mention starting at p - j, j < n_c.
    starts_ext = tf.concat([tf.zeros([num_cands, max_len], tf.bool), starts],
                           axis=1)  # [C, K + T]
    back = tf.range(num_tokens)[:, tf.newaxis] - offsets + max_len  # [T, K]
    covered = tf.reduce_any(
        tf.gather(starts_ext, back, axis=1) & needed[:, tf.newaxis], axis=-1)
    cand_index = tf.range(num_cands)[:, tf.newaxis]
    linked = tf.reduce_max(tf.where(covered, cand_index, -1), axis=0)
    # No candidates: reduce_max over nothing is INT_MIN.
    return tf.maximum(linked, -1)


def _kept_sentences(sentences: tf.RaggedTensor, sent_lens: tf.Tensor,
                    global_budget: tf.Tensor, long_budget: tf.Tensor,
                    max_num_sentences: Optional[int]) -> tf.Tensor:
  """The sentences kept so that the documents fit, as the original drops
  them.

  Sentences are dropped in the original's max-heap order, in closed form:
  by position in the document (last first), then by the document's sentence
  count (fewer first), then by document index; as few as needed for the
  documents' global tokens (a paragraph token each, emptied or not, and one
  per kept sentence), long tokens and sentences to fit.

  Args:
    sentences: <string>[D, (S_d)] (its row partition only is read).
    sent_lens: <int32>[S] wordpieces per sentence.
    global_budget, long_budget: <int32>[] the global and long tokens left
      for the documents.
    max_num_sentences: an optional cap on the kept sentences.

  Returns:
    <bool>[S]: a prefix of every document.
  """
  i32 = tf.int32
  num_docs = tf.cast(sentences.nrows(), i32)
  doc_num_sents = tf.cast(sentences.row_lengths(), i32)  # [D]
  sent_doc = tf.cast(sentences.value_rowids(), i32)  # [S]
  num_sents = tf.size(sent_doc, out_type=i32)
  sent_pos = tf.range(num_sents) - tf.gather(
      tf.cast(sentences.row_starts(), i32), sent_doc)
  sentence_budget = (num_sents if max_num_sentences is None else
                     tf.constant(max_num_sentences, i32))
  big = tf.cast(tf.maximum(num_sents, num_docs) + 1, tf.int64)
  key = (tf.cast(num_sents - sent_pos, tf.int64) * big * big +
         tf.cast(tf.gather(doc_num_sents, sent_doc), tf.int64) * big +
         tf.cast(sent_doc, tf.int64))
  removal_order = tf.argsort(key, stable=True)  # [S]
  removal_rank = tf.math.invert_permutation(removal_order)  # [S]
  removed_tokens = tf.concat(
      [[0], tf.cumsum(tf.gather(sent_lens, removal_order))], axis=0)
  num_removed = tf.range(num_sents + 1)  # k = 0..S
  sentences_left = num_sents - num_removed
  fits = ((num_docs + sentences_left <= global_budget) &
          (tf.reduce_sum(sent_lens) - removed_tokens <= long_budget) &
          (sentences_left <= sentence_budget))
  num_drop = tf.reduce_min(tf.where(fits, num_removed, num_sents))
  return removal_rank >= num_drop


def _contains(texts: tf.Tensor, needles: tf.Tensor) -> tf.Tensor:
  """<bool>[N, M]: whether needle n occurs in text m as a substring.

  Args:
    texts: <string>[M].
    needles: <string>[N]; an empty needle occurs nowhere (as the original's
      check, which skips an empty candidate).
  """
  # RE2 quotes everything between \Q and \E; a "\E" inside the needle
  # closes the quote, so it is written as \E\\E\Q (end quote, a literal
  # backslash and E, quote again).
  quoted = tf.strings.regex_replace(needles, r"\\E", r"\\E\\\\E\\Q")
  patterns = tf.strings.join(["(?s).*\\Q", quoted, "\\E.*"])

  def one(pattern):
    return tf.strings.regex_full_match(texts, pattern)

  found = tf.map_fn(one, patterns, fn_output_signature=tf.TensorSpec(
      [None], tf.bool))
  found = tf.reshape(found, [tf.size(needles), tf.size(texts)])
  return found & (tf.strings.length(needles) > 0)[:, tf.newaxis]
