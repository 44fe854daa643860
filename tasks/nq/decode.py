"""Natural Questions decoding: window logits -> one official prediction per
document, in the graph (per window, and per document for serving) and in
Python (aggregating the predicted windows of each `example_id`).

Scores are relative to the null answer, the [CLS] position 0 of each head,
as the original (`etcmodel/models/nq/eval_nq_lib.py`): each position's logit
becomes `logit - logit[CLS]` (`score_mode='difference'`, the default) or
`logit / logit[CLS]` (`'ratio'`, the original's exact rule; it flips the
ranking whenever the [CLS] logit is negative, hence not the default), and a
span scores `start(first) + end(last)`.

Per window (`window_answers`):

* long answer: the best-scoring long-answer candidate with a global token in
  the window, scored at the candidate's first wordpiece (long-start head) and
  its last wordpiece (long-end head). Only candidates the window holds whole
  (first and last document token inside) are eligible: a window that cuts a
  candidate holds at most one of its ends; a cut candidate is decoded from
  the window that holds it whole.
* short answer: the best span [i, j] inside that candidate, i <= j < i + K
  (K = `max_short_answer_length` wordpieces; the original limited 32 document
  tokens), scored by the short-start / short-end heads; snapped to whole
  document tokens (a token's wordpieces all map to it).

Per document (`document_answer` in the graph, `document_prediction` in
Python): the window with the best long score (the first on ties, windows in
order) gives the long answer, its short answer and the answer type (argmax
of that window's 5 answer-type logits): YES / NO replace the short answer
(`short_answers` = [], `yes_no_answer` "YES" / "NO", as the original); the
original's other types change nothing. A document without an eligible
candidate gets null answers and `NO_ANSWER_SCORE`. The official scorer then
searches the score thresholds (below one a prediction counts as null).
"""

import dataclasses
from typing import Any, Dict, Iterable, List, Mapping, Sequence

import numpy as np
import tensorflow as tf

from etc_realformer.errors import UserInputError
from tasks.common.featurization import logits as logits_lib
from tasks.nq import data

DIFFERENCE, RATIO = "difference", "ratio"
SCORE_MODES = (DIFFERENCE, RATIO)
# Scores of masked positions.
NEG_INF = logits_lib.NEG_INF
# The score of a missing answer (float32-safe).
NO_ANSWER_SCORE = -1e9
YES_NO = {data.YES: "YES", data.NO: "NO"}

# Features `window_answers` reads.
DECODE_FEATURES = (
    "doc_token_map", "long_start_byte", "long_end_byte",
    "global_candidate_index", "global_candidate_long_start",
    "global_candidate_long_end", "global_candidate_doc_start",
    "global_candidate_doc_end", "global_candidate_start_byte",
    "global_candidate_end_byte")
# What `window_answers` returns ([B] each).
WINDOW_OUTPUTS = (
    "long_score", "long_global", "long_candidate", "long_start", "long_end",
    "long_start_token", "long_end_token", "long_start_byte_pred",
    "long_end_byte_pred", "short_score", "short_start", "short_end",
    "short_start_token", "short_end_token", "short_start_byte_pred",
    "short_end_byte_pred")


# ------------------------------------------------------------------- in graph
def mask_long_logits(logits: tf.Tensor, doc_token_map: tf.Tensor
                     ) -> tf.Tensor:
  """[B, L] logits with NEG_INF except at document tokens and [CLS] (0).

  The original's `mask_long_output`: answers start and end in the document
  (or at [CLS] for none), never in the question, a [SEP] or the padding.
  """
  positions = tf.range(tf.shape(logits)[-1])
  allowed = tf.logical_or(doc_token_map >= 0, tf.equal(positions, 0))
  return tf.where(allowed, logits, tf.cast(NEG_INF, logits.dtype))


def relative_scores(logits: tf.Tensor, score_mode: str = DIFFERENCE
                    ) -> tf.Tensor:
  """[B, L] position scores relative to the [CLS] (position 0) logit."""
  null = logits[:, :1]
  if score_mode == DIFFERENCE:
    return logits - null
  if score_mode == RATIO:
    return tf.math.divide_no_nan(logits, null)
  raise UserInputError(f"score_mode must be one of {SCORE_MODES}, got "
                       f"{score_mode!r}")


def _byte_span(start: tf.Tensor, end: tf.Tensor):
  """Both -1 unless 0 <= start < end (the official format's rule)."""
  ok = (start >= 0) & (end > start)
  minus_one = tf.constant(-1, start.dtype)
  return tf.where(ok, start, minus_one), tf.where(ok, end, minus_one)


def window_answers(long_start_logits: tf.Tensor, long_end_logits: tf.Tensor,
                   short_start_logits: tf.Tensor, short_end_logits: tf.Tensor,
                   features: Mapping[str, tf.Tensor],
                   max_short_answer_length: int = 32,
                   score_mode: str = DIFFERENCE) -> Dict[str, tf.Tensor]:
  """Each window's best long answer and the best short answer inside it.

  Args:
    long_start_logits, long_end_logits, short_start_logits, short_end_logits:
      float32 [B, L] (masked or not: only document positions are read).
    features: the windows' `DECODE_FEATURES` ([B, L] / [B, G]).
    max_short_answer_length: K, the longest short answer in wordpieces.
    score_mode: 'difference' or 'ratio' (see the module docstring).

  Returns:
    [B] tensors (-1 / NO_ANSWER_SCORE where the window has no eligible
    candidate): long_score, long_global (global position), long_candidate
    (index in `long_answer_candidates`), long_start / long_end (inclusive
    window positions), long_start_token / long_end_token (document tokens,
    end exclusive), long_start_byte_pred / long_end_byte_pred (int64);
    short_score, short_start / short_end, short_start_token /
    short_end_token, short_start_byte_pred / short_end_byte_pred likewise.
  """
  k = int(max_short_answer_length)
  if k < 1:
    raise UserInputError(
        f"max_short_answer_length must be >= 1, got {k}")
  rel_ls, rel_le, rel_ss, rel_se = (
      relative_scores(tf.cast(x, tf.float32), score_mode)
      for x in (long_start_logits, long_end_logits, short_start_logits,
                short_end_logits))
  long_answer = _best_long_answer(rel_ls, rel_le, features)
  short_answer = _best_short_answer(rel_ss, rel_se, features, long_answer, k)
  return {**long_answer.outputs(), **short_answer}


@dataclasses.dataclass(frozen=True)
class _LongAnswer:
  """A window's best long answer: [B] tensors, and its candidates' scores."""
  has_answer: tf.Tensor  # <bool>[B]: some candidate is eligible.
  global_index: tf.Tensor  # <int32>[B] g, the candidate's global token.
  score: tf.Tensor  # float32 [B]
  candidate: tf.Tensor  # <int32>[B] index in `long_answer_candidates`
  start: tf.Tensor  # <int32>[B] inclusive window positions
  end: tf.Tensor
  start_token: tf.Tensor  # <int32>[B] document tokens, end exclusive
  end_token: tf.Tensor
  start_byte: tf.Tensor  # <int64>[B]
  end_byte: tf.Tensor

  def outputs(self) -> Dict[str, tf.Tensor]:
    has = self.has_answer
    return {
        "long_score": _or_none(has, self.score, NO_ANSWER_SCORE),
        "long_global": _or_none(has, self.global_index),
        "long_candidate": _or_none(has, self.candidate),
        "long_start": _or_none(has, self.start),
        "long_end": _or_none(has, self.end),
        "long_start_token": _or_none(has, self.start_token),
        "long_end_token": _or_none(has, self.end_token),
        "long_start_byte_pred": _or_none(has, self.start_byte),
        "long_end_byte_pred": _or_none(has, self.end_byte),
    }


def _best_long_answer(rel_ls: tf.Tensor, rel_le: tf.Tensor,
                      features: Mapping[str, tf.Tensor]) -> _LongAnswer:
  """The best of the candidates that have a global token and that the
  window holds whole, scored start + end."""
  i32 = tf.int32
  dmap = tf.cast(features["doc_token_map"], i32)
  long_len = tf.shape(dmap)[1]
  cand = tf.cast(features["global_candidate_index"], i32)
  c_start = tf.cast(features["global_candidate_long_start"], i32)
  c_end = tf.cast(features["global_candidate_long_end"], i32)
  doc_start = tf.cast(features["global_candidate_doc_start"], i32)
  doc_end = tf.cast(features["global_candidate_doc_end"], i32)
  safe_start = tf.clip_by_value(c_start, 0, long_len - 1)
  safe_end = tf.clip_by_value(c_end, 0, long_len - 1)
  eligible = ((cand >= 0) & (c_start > 0) & (c_end >= c_start) &
              tf.equal(tf.gather(dmap, safe_start, batch_dims=1), doc_start) &
              tf.equal(tf.gather(dmap, safe_end, batch_dims=1), doc_end - 1))
  cand_score = (tf.gather(rel_ls, safe_start, batch_dims=1) +
                tf.gather(rel_le, safe_end, batch_dims=1))
  cand_score = tf.where(eligible, cand_score, NEG_INF)
  g = tf.argmax(cand_score, axis=-1, output_type=i32)  # [B]

  def at_g(x):
    return tf.gather(x, g, batch_dims=1)

  start_byte, end_byte = _byte_span(
      at_g(tf.cast(features["global_candidate_start_byte"], tf.int64)),
      at_g(tf.cast(features["global_candidate_end_byte"], tf.int64)))
  return _LongAnswer(
      has_answer=tf.reduce_any(eligible, axis=-1), global_index=g,
      score=at_g(cand_score), candidate=at_g(cand), start=at_g(safe_start),
      end=at_g(safe_end), start_token=at_g(doc_start),
      end_token=at_g(doc_end), start_byte=start_byte, end_byte=end_byte)


def _best_short_answer(rel_ss: tf.Tensor, rel_se: tf.Tensor,
                       features: Mapping[str, tf.Tensor],
                       long_answer: _LongAnswer, k: int
                       ) -> Dict[str, tf.Tensor]:
  """The best span [i, i + j], j < k, of document tokens inside the long
  answer, scored start + end; the `short_*` outputs."""
  i32 = tf.int32
  dmap = tf.cast(features["doc_token_map"], i32)
  long_len = tf.shape(dmap)[1]
  batch = tf.shape(dmap)[0]
  lo, hi = long_answer.start, long_answer.end
  starts = tf.range(long_len)[:, tf.newaxis]  # [L, 1]
  ends = starts + tf.range(k)[tf.newaxis]  # [L, K]
  safe_ends = tf.minimum(ends, long_len - 1)
  in_doc = dmap >= 0
  valid = ((ends < long_len)[tf.newaxis] &
           in_doc[:, :, tf.newaxis] &
           tf.gather(in_doc, safe_ends, axis=1) &
           (starts[tf.newaxis] >= lo[:, tf.newaxis, tf.newaxis]) &
           (ends[tf.newaxis] <= hi[:, tf.newaxis, tf.newaxis]) &
           long_answer.has_answer[:, tf.newaxis, tf.newaxis])  # [B, L, K]
  span_score = rel_ss[:, :, tf.newaxis] + tf.gather(rel_se, safe_ends, axis=1)
  span_score = tf.reshape(tf.where(valid, span_score, NEG_INF), [batch, -1])
  best = tf.argmax(span_score, axis=-1, output_type=i32)
  has = tf.reduce_any(tf.reshape(valid, [batch, -1]), axis=-1)
  s_start = best // k
  s_end = s_start + best % k
  start_byte, end_byte = _byte_span(
      tf.gather(tf.cast(features["long_start_byte"], tf.int64), s_start,
                batch_dims=1),
      tf.gather(tf.cast(features["long_end_byte"], tf.int64), s_end,
                batch_dims=1))
  return {
      "short_score": _or_none(has, tf.reduce_max(span_score, -1),
                              NO_ANSWER_SCORE),
      "short_start": _or_none(has, s_start),
      "short_end": _or_none(has, s_end),
      "short_start_token": _or_none(
          has, tf.gather(dmap, s_start, batch_dims=1)),
      "short_end_token": _or_none(
          has, tf.gather(dmap, s_end, batch_dims=1) + 1),
      "short_start_byte_pred": _or_none(has, start_byte),
      "short_end_byte_pred": _or_none(has, end_byte),
  }


def _or_none(ok: tf.Tensor, x: tf.Tensor, none=-1) -> tf.Tensor:
  """`x` where `ok`, else `none` (no eligible answer)."""
  return tf.where(ok, x, tf.cast(none, x.dtype))


def document_answer(windows: Mapping[str, tf.Tensor],
                    answer_type_logits: tf.Tensor) -> Dict[str, tf.Tensor]:
  """One document's answer from its W windows' `window_answers` (in order).

  Args:
    windows: `WINDOW_OUTPUTS` tensors [W].
    answer_type_logits: float32 [W, 5].

  Returns:
    Scalars: long_start_token, long_end_token (end exclusive),
    long_start_byte, long_end_byte, long_score, long_candidate, short_*
    likewise (all -1 when none; short -1 too for a yes/no answer),
    short_score, answer_type (of the chosen window), answer_type_probs [5],
    yes_no_answer ("NONE" / "YES" / "NO"), window (the chosen window, -1).
  """
  has_long = windows["long_candidate"] >= 0
  any_long = tf.reduce_any(has_long)
  w = tf.argmax(tf.where(has_long, windows["long_score"], NEG_INF),
                output_type=tf.int32)
  w = tf.where(any_long, w, 0)
  picked = {k: v[w] for k, v in windows.items()}
  answer_type = tf.argmax(answer_type_logits[w], output_type=tf.int32)
  is_yes = any_long & tf.equal(answer_type, data.YES)
  is_no = any_long & tf.equal(answer_type, data.NO)
  yes_no = tf.where(is_yes, "YES", tf.where(is_no, "NO", "NONE"))
  span_ok = any_long & ~(is_yes | is_no) & (picked["short_start"] >= 0)

  def short(x):
    return tf.where(span_ok, x, tf.cast(-1, x.dtype))

  def long(x):
    return tf.where(any_long, x, tf.cast(-1, x.dtype))

  return {
      "long_start_token": long(picked["long_start_token"]),
      "long_end_token": long(picked["long_end_token"]),
      "long_start_byte": long(picked["long_start_byte_pred"]),
      "long_end_byte": long(picked["long_end_byte_pred"]),
      "long_candidate": long(picked["long_candidate"]),
      "long_score": tf.where(any_long, picked["long_score"], NO_ANSWER_SCORE),
      "short_start_token": short(picked["short_start_token"]),
      "short_end_token": short(picked["short_end_token"]),
      "short_start_byte": short(picked["short_start_byte_pred"]),
      "short_end_byte": short(picked["short_end_byte_pred"]),
      "short_score": tf.where(any_long, picked["short_score"],
                              NO_ANSWER_SCORE),
      "answer_type": answer_type,
      "answer_type_probs": tf.nn.softmax(answer_type_logits[w]),
      "yes_no_answer": yes_no,
      "window": tf.where(any_long, w, -1),
  }


def span_text(doc_tokens: tf.Tensor, is_html: tf.Tensor, start: tf.Tensor,
              end: tf.Tensor) -> tf.Tensor:
  """The non-HTML tokens of [start, end) joined by spaces ("" when -1): an
  answer's text for the serving signatures."""
  start = tf.maximum(start, 0)
  end = tf.maximum(end, start)
  tokens = doc_tokens[start:end]
  keep = tf.logical_not(is_html[start:end])
  return tf.strings.reduce_join(tf.boolean_mask(tokens, keep), separator=" ")


# --------------------------------------------------------------------- Python
def _span(start_token, end_token, start_byte=-1, end_byte=-1
          ) -> Dict[str, int]:
  start_byte, end_byte = int(start_byte), int(end_byte)
  if not 0 <= start_byte < end_byte:
    start_byte = end_byte = -1
  return {"start_token": int(start_token), "end_token": int(end_token),
          "start_byte": start_byte, "end_byte": end_byte}


NULL_SPAN = {"start_token": -1, "end_token": -1, "start_byte": -1,
             "end_byte": -1}


def document_prediction(example_id: int,
                        windows: Sequence[Mapping[str, Any]]
                        ) -> Dict[str, Any]:
  """The official prediction of one document from its windows' outputs.

  Args:
    example_id: the NQ example_id.
    windows: per-window dicts with `window_index`, `answer_type_logits` [5]
      and the `WINDOW_OUTPUTS` (any order; sorted by window_index here).
  """
  windows = sorted(windows, key=lambda x: int(x["window_index"]))
  best = None
  for window in windows:
    if int(window["long_candidate"]) < 0:
      continue
    if best is None or float(window["long_score"]) > float(
        best["long_score"]):
      best = window
  prediction = {"example_id": int(example_id), "long_answer": dict(NULL_SPAN),
                "long_answer_score": float(NO_ANSWER_SCORE),
                "short_answers": [],
                "short_answers_score": float(NO_ANSWER_SCORE),
                "yes_no_answer": "NONE"}
  if best is None:
    return prediction
  prediction["long_answer"] = _span(
      best["long_start_token"], best["long_end_token"],
      best["long_start_byte_pred"], best["long_end_byte_pred"])
  prediction["long_answer_score"] = float(best["long_score"])
  prediction["short_answers_score"] = float(best["short_score"])
  answer_type = int(np.argmax(best["answer_type_logits"]))
  if answer_type in YES_NO:
    prediction["yes_no_answer"] = YES_NO[answer_type]
  elif int(best["short_start"]) >= 0:
    prediction["short_answers"] = [_span(
        best["short_start_token"], best["short_end_token"],
        best["short_start_byte_pred"], best["short_end_byte_pred"])]
  return prediction


def predictions_json(windows: Iterable[Mapping[str, Any]],
                     example_ids: Sequence[int] = ()) -> Dict[str, Any]:
  """The official predictions object of all documents in `windows`.

  Args:
    windows: per-window dicts (`io.unbatch` of the predict outputs).
    example_ids: documents to predict even without a window (null
      predictions), e.g. the gold ids; others are added after them.
  """
  by_id: Dict[int, List[Mapping[str, Any]]] = {}
  for window in windows:
    by_id.setdefault(int(window["example_id"]), []).append(window)
  ordered = list(dict.fromkeys([int(i) for i in example_ids] + list(by_id)))
  return {"predictions": [document_prediction(i, by_id.get(i, []))
                          for i in ordered]}
