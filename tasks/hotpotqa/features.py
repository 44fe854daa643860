"""HotpotQA featurization: question + context strings -> ETC raw features.

The model inputs are built with TensorFlow ops only (`HotpotFeaturizer`), so
the same code runs in preprocessing (through `tf.data`) and in the raw-input
serving signature. Labels need the gold answer and supporting facts and are
added in Python by `add_labels` from the features and the record.

Segments (as the original ETC HotpotQA preprocessing):

  global: [CLS][one per question wordpiece]
          [paragraph token, title token, one token per sentence] per
          paragraph, padding
  long:   [CLS][question wordpieces][title wordpieces, sentence wordpieces]
          per paragraph, padding

- `long_sentence_ids[i]`: global index of long token i's question-wordpiece,
  title or sentence token; -1 for CLS and padding.
- `long_paragraph_ids[i]`: global index of the paragraph token of a context
  token's paragraph; -1 for CLS, question and padding.
- `long_paragraph_breakpoints`: 1 at CLS, at the last question wordpiece and
  at the last token of each paragraph; `global_paragraph_breakpoints`: 1 at
  CLS, the last question token and the last token of each paragraph.
- `ignore_hard_g2l_mask`: 1 on CLS only (it sees the whole long input under
  hard g2l masking: the answer type is read from it).
- `global_paragraph_ids` / `global_sentence_ids`: the paragraph index in the
  record's context (paragraph, title and sentence tokens) and the sentence
  index in the paragraph (sentence tokens); -1 otherwise. `global_kinds`
  names each global token's role (see `KIND_*`).
- `long_token_start` / `long_token_end`: byte offsets [start, end) of a
  context wordpiece in its title / sentence string (UTF-8), so that a
  predicted span maps back to the exact original substring; -1 elsewhere.
- Token types: long CLS 1, question 3, title 2, sentence 1; every global
  token 0 (the original's choices).

Truncation is the original's greedy pass: the question wordpieces are kept
while they fit, then paragraph tokens, titles and sentences are visited in
order and each is kept if it still fits (a paragraph token needs one global
token; a title or sentence one global token and its wordpieces), otherwise
skipped -- a later, shorter sentence may still fit. Unlike the original,
`global_sentence_ids` keeps a sentence's index in its paragraph after such a
skip (the original numbers the kept sentences 0, 1, 2, ...), so that
decoding names the right supporting sentence.

Answer spans are located as the original's example generation does it
(`answer_spans.AnswerLocator`): WordPiece widens an occurrence to the whitespace
words it touches, then narrows it to a run of pieces equal to the answer's own;
SentencePiece searches the text the pieces spell (normalized by the model).
Deliberately unlike the original, yes / no answers point at CLS, and occurrences
in text dropped to fit are not labelled.
"""

import dataclasses
import json
from typing import ClassVar, Dict, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf

from etc_realformer.features import feature_names
from tasks.common.featurization import featurizing
from tasks.common.featurization import segments
from tasks.common.featurization import tokenization
from tasks.hotpotqa import answer_spans
from tasks.hotpotqa import data


# Token type ids (segment ids), shared by long and global inputs.
GLOBAL_TOKEN_TYPE_ID = 0


SENTENCE_TOKEN_TYPE_ID = 1


TITLE_TOKEN_TYPE_ID = 2


QUESTION_TOKEN_TYPE_ID = 3


# `global_kinds` values.
KIND_PAD, KIND_CLS, KIND_QUESTION, KIND_PARAGRAPH, KIND_TITLE, KIND_SENTENCE = (
    range(6))


# `answer_bio_ids` values (the BIO variant of the span labels).
BIO_BEGIN, BIO_INSIDE, BIO_OUTSIDE = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class GlobalTokenIds(featurizing.SpecialTokenIds):
  """Vocabulary ids of the special global tokens (and the long CLS).

  The defaults are the original's: in a BERT vocabulary its "[CLS]" (101 in
  the released ones), [unused0] (the pre-training sentence token), [unused2],
  [unused4]; in ETC's SentencePiece vocabulary <unused_39>, </s>,
  <unused_40>, <unused_42>.
  """
  cls: int
  sentence: int
  question: int
  paragraph: int

  WORDPIECE: ClassVar = dict(cls="[CLS]", sentence=1, question=3,
                             paragraph=5)
  SENTENCEPIECE: ClassVar = dict(cls=40, sentence=1, question=41,
                                 paragraph=43)


LONG_TOKEN_START = "long_token_start"


LONG_TOKEN_END = "long_token_end"


GLOBAL_PARAGRAPH_IDS = "global_paragraph_ids"


GLOBAL_SENTENCE_IDS = "global_sentence_ids"


GLOBAL_KINDS = "global_kinds"


EXAMPLE_ID = "example_id"


# The long and global features (see the module docstring).
SEGMENT_PLAN = segments.SegmentPlan(
    segments.MULTIHOP,
    long_features=(segments.Feature(LONG_TOKEN_START, -1),
                   segments.Feature(LONG_TOKEN_END, -1)),
    global_features=(segments.Feature(GLOBAL_PARAGRAPH_IDS, -1),
                     segments.Feature(GLOBAL_SENTENCE_IDS, -1),
                     segments.Feature(GLOBAL_KINDS, KIND_PAD),
                     segments.Feature(feature_names.IGNORE_HARD_G2L_MASK)))


# The int32 features the model reads (encoder inputs, side-input sources and
# what the head needs to locate spans); the inputs of `serving_default`.
MODEL_FEATURES: Tuple[str, ...] = SEGMENT_PLAN.model_features


LABEL_FEATURES: Tuple[str, ...] = (
    "supporting_facts", "answer_type", "answer_start", "answer_end",
    "answer_bio_ids")


# Truncation amounts returned with the features.
TRUNCATION_STATS: Tuple[str, ...] = (
    "question_tokens_dropped", "paragraphs_dropped", "titles_dropped",
    "sentences_dropped", "context_tokens_dropped")


def feature_spec(
    long_seq_len: int = 4096, global_seq_len: int = 256
) -> Dict[str, Tuple[tf.DType, Tuple[Optional[int], ...]]]:
  """The HotpotQA features: name -> (dtype, shape), unbatched.

  L = long_seq_len, G = global_seq_len. Model inputs: see the module
  docstring. Labels (-1 / 0 when unknown, e.g. serving):

  supporting_facts [G]: 1 on the paragraph, title and sentence tokens of the
    supporting facts (paragraph and title: any fact in that paragraph).
  answer_type []: 0 span, 1 yes, 2 no; -1 unknown.
  answer_start, answer_end []: inclusive long positions of the answer's
    occurrence with the smallest end in a kept supporting title / sentence,
    located as the original does (`answer_spans.AnswerLocator`); 0, 0 (CLS) for
    yes/no; -1 when not located (kept only in non-training files).
  answer_bio_ids [L]: 0 B / 1 I / 2 O over every located occurrence in
    kept supporting text (the BIO variant); all O for yes/no; -1 everywhere
    when unknown.
  example_id []: `_id`.
  record_json []: the record as JSON (question, context and, when labelled,
    answer / supporting facts): decoding recovers answer text from it and
    scoring uses its gold.
  """
  long_ = (long_seq_len,)
  global_ = (global_seq_len,)
  spec = SEGMENT_PLAN.spec(long_seq_len, global_seq_len)
  spec.update({
      "supporting_facts": (tf.int32, global_),
      "answer_type": (tf.int32, ()),
      "answer_start": (tf.int32, ()),
      "answer_end": (tf.int32, ()),
      "answer_bio_ids": (tf.int32, long_),
      EXAMPLE_ID: (tf.string, ()),
      "record_json": (tf.string, ()),
  })
  return spec


class HotpotFeaturizer(featurizing.Featurizer):
  """HotpotQA question + context -> ETC raw model features, in TF ops.

  Example:
    featurizer = HotpotFeaturizer(vocab_path="vocab.txt")
    features = featurizer.featurize(question, titles, sentences,
                                       num_sentences)

  A `tf.Module`: an exporter attaches it to the model and calls
  `featurize` inside a serving `tf.function`.
  """

  def __init__(self,
               vocab_path: Optional[str] = None,
               spm_model_path: Optional[str] = None,
               *,
               tokenizer: Optional[tokenization.Tokenizer] = None,
               long_seq_len: int = 4096,
               global_seq_len: int = 256,
               global_token_ids: Optional[GlobalTokenIds] = None,
               lower_case: bool = True):
    """Builds a featurizer.

    Args:
      vocab_path, spm_model_path, tokenizer, lower_case: the vocabulary
        (`featurizing.Featurizer`).
      long_seq_len: L (original 4096).
      global_seq_len: G (original 256).
      global_token_ids: special ids; `GlobalTokenIds.for_tokenizer` if None.
    """
    # L and G >= 2: CLS and at least one more token.
    super().__init__("hotpotqa_featurizer", vocab_path, spm_model_path,
                     tokenizer, long_seq_len, global_seq_len, lower_case,
                     min_seq_len=2)
    self.global_token_ids = (global_token_ids or
                             GlobalTokenIds.for_tokenizer(self.tokenizer))
    # A plain object: not tracked, so not part of an export.
    self._answer_locator = answer_spans.AnswerLocator(self.tokenizer)
    # (question, titles, sentences, num_sentences, example_id)
    self._record_fn = tf.function(self._featurize, input_signature=[
        tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.string),
        tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int32),
        tf.TensorSpec([], tf.string)])

  def feature_spec(self):
    return feature_spec(self.long_seq_len, self.global_seq_len)

  # --------------------------------------------------------------- public API
  def featurize(self, question: tf.Tensor, titles: tf.Tensor,
                   sentences: tf.Tensor, num_sentences: tf.Tensor,
                   example_id: Optional[tf.Tensor] = None
                   ) -> Dict[str, tf.Tensor]:
    """One record's model features (`MODEL_FEATURES` + `example_id`).

    Args:
      question: <string>[].
      titles: <string>[P] paragraph titles.
      sentences: <string>[S] all paragraphs' sentences, concatenated.
      num_sentences: <int32>[P] sentences per paragraph (sums to S).
      example_id: <string>[]; "" when None.

    Returns:
      Dict of fixed-shape tensors ([L], [G], []).
    """
    features, _ = self.featurize_with_stats(question, titles, sentences,
                                               num_sentences, example_id)
    return features

  def featurize_with_stats(self, question, titles, sentences,
                              num_sentences, example_id=None):
    """`featurize` plus the <int32>[] `TRUNCATION_STATS`."""
    example_id = tf.constant("") if example_id is None else example_id
    return self._featurize(
        tf.convert_to_tensor(question, tf.string),
        tf.convert_to_tensor(titles, tf.string),
        tf.convert_to_tensor(sentences, tf.string),
        tf.cast(num_sentences, tf.int32),
        tf.convert_to_tensor(example_id, tf.string))

  @property
  def record_fn(self):
    """The compiled (question, titles, sentences, num_sentences, example_id)
    -> (features, stats) function, for `tf.data` pipelines."""
    return self._record_fn

  def featurize_record(self, record: data.HotpotRecord,
                       is_training: bool = False
                       ) -> Tuple[Dict[str, np.ndarray], Dict[str, int],
                                  Optional[str]]:
    """Eager helper: a record -> (all `feature_spec` features, truncation
    stats, skip reason or None). See `add_labels`."""
    features, stats = self._record_fn(*record_inputs(record))
    features = {k: v.numpy() for k, v in features.items()}
    reason = add_labels(features, record, is_training, self.answer_locator)
    return features, {k: int(v.numpy()) for k, v in stats.items()}, reason

  @property
  def answer_locator(self) -> answer_spans.AnswerLocator:
    """The `answer_spans.AnswerLocator` of this featurizer's tokenizer (for
    `add_labels`)."""
    return self._answer_locator

  # ----------------------------------------------------------- implementation
  def _featurize(self, question, titles, sentences, num_sentences,
                 example_id):
    L, G = self.long_seq_len, self.global_seq_len  # pylint: disable=invalid-name
    ids = self.global_token_ids
    i32 = tf.int32

    # --- Question: each wordpiece is 1 long + 1 global token (prefix kept).
    q_ids = self.tokenizer.tokenize(tf.reshape(question, [1])).flat_values
    num_q = tf.size(q_ids, out_type=i32)
    q_keep = tf.minimum(num_q, tf.minimum(L, G) - 1)

    # --- Context texts per paragraph: [title, sentence 0, sentence 1, ...].
    para_sents = tf.RaggedTensor.from_row_lengths(sentences, num_sentences)
    texts = tf.concat([titles[:, tf.newaxis], para_sents], axis=1)  # [P, (T)]
    text_pieces = self.tokenizer.tokenize_with_offsets(
        texts.flat_values)  # ids, starts, ends: [T, (n)]
    items = _greedy_fit(texts, text_pieces[0], long_budget=L - 1 - q_keep,
                        global_budget=G - 1 - q_keep)
    context, stats = self._context(text_pieces, *items)

    features = SEGMENT_PLAN.build([
        # CLS sees the whole long input under hard g2l masking (the answer
        # type is read from it); its long token belongs to no global token.
        segments.Segment(
            [ids.cls], [ids.cls], sentence_ids=[-1],
            segment_ids=SENTENCE_TOKEN_TYPE_ID,
            global_features={GLOBAL_KINDS: KIND_CLS,
                             feature_names.IGNORE_HARD_G2L_MASK: 1}),
        segments.per_token(q_ids[:q_keep], ids.question,
                           QUESTION_TOKEN_TYPE_ID, GLOBAL_TOKEN_TYPE_ID,
                           global_features={GLOBAL_KINDS: KIND_QUESTION}),
        context,
    ], L, G)
    features[EXAMPLE_ID] = tf.reshape(example_id, [])
    return features, {"question_tokens_dropped": num_q - q_keep, **stats}

  def _context(self, text_pieces: Tuple[tf.RaggedTensor, ...],
               item_para: tf.Tensor, item_pos: tf.Tensor, item_keep: tf.Tensor
               ) -> Tuple[segments.Segment, Dict[str, tf.Tensor]]:
    """The context's segment (global: the kept paragraph, title and sentence
    tokens; long: the kept texts' wordpieces) and its truncation stats, from
    the texts' pieces [T, (n)] (ids, start and end bytes) and the items of
    `_greedy_fit`."""
    ids = self.global_token_ids
    i32 = tf.int32
    text_ids, text_starts, text_ends = text_pieces
    is_para_item = tf.equal(item_pos, 0)
    text_para = tf.boolean_mask(item_para, ~is_para_item)  # [T]
    text_pos = tf.boolean_mask(item_pos, ~is_para_item) - 1  # 0: title

    # Global: the kept items; each one's index in the segment (-1 dropped).
    item_global = tf.where(item_keep, tf.cumsum(tf.cast(item_keep, i32)) - 1,
                           -1)
    k_para = tf.boolean_mask(item_para, item_keep)  # [K]
    k_pos = tf.boolean_mask(item_pos, item_keep)
    k_kind = tf.where(k_pos == 0, KIND_PARAGRAPH,
                      tf.where(k_pos == 1, KIND_TITLE, KIND_SENTENCE))
    # Per paragraph and per text (items in order), its global token.
    para_global = tf.boolean_mask(item_global, is_para_item)  # [P]
    text_global = tf.boolean_mask(item_global, ~is_para_item)  # [T]

    # Long: the kept texts' wordpieces.
    token_text = tf.cast(text_ids.value_rowids(), i32)
    token_keep = tf.gather(text_global >= 0, token_text)
    ctx_text = tf.boolean_mask(token_text, token_keep)
    ctx_para = tf.gather(text_para, ctx_text)

    def kept(pieces):  # the kept texts' pieces
      return tf.boolean_mask(pieces.flat_values, token_keep)

    segment = segments.Segment(
        token_ids=kept(text_ids),
        global_token_ids=tf.where(k_pos == 0, ids.paragraph, ids.sentence),
        sentence_ids=tf.gather(text_global, ctx_text),
        segment_ids=tf.where(tf.equal(tf.gather(text_pos, ctx_text), 0),
                             TITLE_TOKEN_TYPE_ID, SENTENCE_TOKEN_TYPE_ID),
        global_segment_ids=GLOBAL_TOKEN_TYPE_ID,
        paragraph_ids=tf.gather(para_global, ctx_para),
        long_paragraphs=ctx_para, global_paragraphs=k_para,
        long_features={LONG_TOKEN_START: kept(text_starts),
                       LONG_TOKEN_END: kept(text_ends)},
        global_features={
            GLOBAL_PARAGRAPH_IDS: k_para, GLOBAL_KINDS: k_kind,
            GLOBAL_SENTENCE_IDS: tf.where(k_kind == KIND_SENTENCE, k_pos - 2,
                                          -1)})
    dropped_texts = text_global < 0
    stats = {
        "paragraphs_dropped": tf.reduce_sum(tf.cast(para_global < 0, i32)),
        "titles_dropped": tf.reduce_sum(
            tf.cast(dropped_texts & (text_pos == 0), i32)),
        "sentences_dropped": tf.reduce_sum(
            tf.cast(dropped_texts & (text_pos > 0), i32)),
        "context_tokens_dropped": tf.reduce_sum(tf.cast(~token_keep, i32)),
    }
    return segment, stats


def _greedy_fit(texts: tf.RaggedTensor, text_ids: tf.RaggedTensor,
                long_budget: tf.Tensor, global_budget: tf.Tensor
                ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """The original's greedy pass over the context's items (per paragraph its
  token, then its texts [P, (T_p)]: title, sentences; pieces [T, (n)]):
  each is kept if its global token and long tokens still fit; sequential by
  nature (a skipped item frees nothing). Returns <int32>[I] each item's
  paragraph and position in it (0 its token, 1 title, 2.. sentences) and
  <bool>[I] whether it is kept."""
  i32 = tf.int32
  items_per_para = 1 + tf.cast(texts.row_lengths(), i32)  # [P]
  para = tf.repeat(tf.range(tf.size(items_per_para)), items_per_para)
  pos = (tf.range(tf.reduce_sum(items_per_para)) -
         tf.repeat(tf.cumsum(items_per_para, exclusive=True),
                   items_per_para))  # 0 = paragraph token
  text = tf.gather(tf.cast(texts.row_starts(), i32), para) + pos - 1
  item_long = tf.where(tf.equal(pos, 0), 0, tf.gather(
      tf.cast(text_ids.row_lengths(), i32), tf.maximum(text, 0)))

  def visit(state, length):
    long_used, global_used, _ = state
    fits = tf.logical_and(long_used + length <= long_budget,
                          global_used + 1 <= global_budget)
    return (tf.where(fits, long_used + length, long_used),
            tf.where(fits, global_used + 1, global_used), fits)

  _, _, item_keep = tf.scan(
      visit, item_long,
      initializer=(tf.constant(0), tf.constant(0), tf.constant(False)))
  return para, pos, tf.ensure_shape(item_keep, [None])


def record_inputs(record: data.HotpotRecord) -> Tuple[tf.Tensor, ...]:
  """The featurizer's inputs for a record (question, titles, sentences,
  num_sentences, example_id)."""
  flat = [s for para in record.sentences for s in para]
  return (tf.constant(record.question), tf.constant(list(record.titles),
                                                    tf.string),
          tf.constant(flat, tf.string),
          tf.constant([len(p) for p in record.sentences], tf.int32),
          tf.constant(record.id))


def text_of(record: data.HotpotRecord, paragraph: int, sentence: int) -> str:
  """A title (sentence = -1) or sentence of the record's context."""
  if sentence < 0:
    return record.titles[paragraph]
  return record.sentences[paragraph][sentence]


def text_token_ranges(features: Mapping[str, np.ndarray]
                      ) -> Dict[int, Tuple[int, int]]:
  """Global index of each title / sentence token -> its long range [a, b)."""
  sentence_ids = np.asarray(features[feature_names.LONG_SENTENCE_IDS])
  kinds = np.asarray(features[GLOBAL_KINDS])
  ranges = {}
  for g in np.flatnonzero((kinds == KIND_TITLE) | (kinds == KIND_SENTENCE)):
    positions = np.flatnonzero(sentence_ids == g)
    if positions.size:
      ranges[int(g)] = (int(positions[0]), int(positions[-1]) + 1)
  return ranges


def add_labels(features: Dict[str, np.ndarray], record: data.HotpotRecord,
               is_training: bool,
               locator: answer_spans.AnswerLocator) -> Optional[str]:
  """Adds `LABEL_FEATURES` and `record_json` to numpy features, in place.

  Supporting-fact flags go on the paragraph and title tokens of every paragraph
  named by a fact (by title) and on the facts' sentence tokens. The answer's
  occurrences are looked up in the kept supporting titles and sentences as the
  original does (`answer_spans.AnswerLocator`); the answer span is the first by
  end position; "yes"/"no" answers point at CLS (0, 0).

  Args:
    features: the featurizer's numpy features of `record`.
    record: the record.
    is_training: apply the training filter.
    locator: the featurizer's `answer_locator`.

  Returns:
    None, or (training only) the reason the example must be skipped:
    `data.NO_SUPPORTING_FACTS`, `data.ANSWER_NOT_FOUND` (not located in the
    kept supporting texts, nor in a dropped one) or `data.ANSWER_TRUNCATED`
    (in a supporting text dropped to fit only).
  """
  long_len = features[feature_names.TOKEN_IDS].shape[0]
  global_len = features[feature_names.GLOBAL_TOKEN_IDS].shape[0]
  features["record_json"] = np.array(
      json.dumps(record.to_json(), ensure_ascii=False).encode("utf-8"))
  sp = np.zeros([global_len], np.int32)
  features["supporting_facts"] = sp
  features["answer_type"] = np.array(-1, np.int32)
  features["answer_start"] = np.array(-1, np.int32)
  features["answer_end"] = np.array(-1, np.int32)
  features["answer_bio_ids"] = np.full([long_len], -1, np.int32)
  if not record.has_labels:
    return None

  facts = record.supporting_sentences()
  kinds = features[GLOBAL_KINDS]
  para_ids = features[GLOBAL_PARAGRAPH_IDS]
  sent_ids = features[GLOBAL_SENTENCE_IDS]
  ranges = text_token_ranges(features)
  supporting_texts = []  # (global index, paragraph, sentence) in long order
  kept = set()  # (paragraph, sentence) of the kept titles and sentences
  for g in range(global_len):
    if kinds[g] not in (KIND_PARAGRAPH, KIND_TITLE, KIND_SENTENCE):
      continue
    para = int(para_ids[g])
    if kinds[g] != KIND_PARAGRAPH:
      kept.add((para, int(sent_ids[g])))
    fact_sents = facts.get(record.titles[para])
    if fact_sents is None:
      continue
    if kinds[g] == KIND_SENTENCE and int(sent_ids[g]) not in fact_sents:
      continue
    sp[g] = 1
    if kinds[g] != KIND_PARAGRAPH:
      supporting_texts.append((g, para, int(sent_ids[g])))

  answer_type = data.answer_type_of(record.answer)
  features["answer_type"] = np.array(answer_type, np.int32)
  spans = []
  if answer_type == data.SPAN:
    for g, para, sent in supporting_texts:
      if g not in ranges:
        continue
      a, b = ranges[g]
      spans.extend(
          (a + start, a + end) for start, end in locator.spans(
              text_of(record, para, sent), record.answer,
              features[feature_names.TOKEN_IDS][a:b],
              features[LONG_TOKEN_START][a:b]))
    spans.sort(key=lambda s: s[1])
    if spans:
      bio = np.full([long_len], BIO_OUTSIDE, np.int32)
      for start, end in spans:
        bio[start] = BIO_BEGIN
        bio[start + 1:end + 1] = BIO_INSIDE
      features["answer_bio_ids"] = bio
      features["answer_start"] = np.array(spans[0][0], np.int32)
      features["answer_end"] = np.array(spans[0][1], np.int32)
  else:
    features["answer_start"] = np.array(0, np.int32)
    features["answer_end"] = np.array(0, np.int32)
    features["answer_bio_ids"] = np.full([long_len], BIO_OUTSIDE, np.int32)

  if not is_training:
    return None
  if not sp.any():
    return data.NO_SUPPORTING_FACTS
  if answer_type == data.SPAN and not spans:
    # Distinguish "not in the supporting facts" from "cut off".
    for title, sent_id in record.supporting_facts or ():
      for para, t in enumerate(record.titles):
        if t != title:
          continue
        texts = [(-1, t)]
        if 0 <= sent_id < len(record.sentences[para]):
          texts.append((sent_id, record.sentences[para][sent_id]))
        if any((para, i) not in kept and record.answer in x
               for i, x in texts):
          return data.ANSWER_TRUNCATED
    return data.ANSWER_NOT_FOUND
  return None
