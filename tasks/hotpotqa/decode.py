"""Answer and supporting-fact decoding, in the graph and in Python.

The rule (the original's span decoding, searched exhaustively instead of over
top-k starts and ends): the answer span starts and ends inside ONE title or
sentence whose global token is predicted as a supporting fact (probability
>= threshold), is at most `max_answer_length` wordpieces long, and maximises
P(start) x P(end). The answer type head decides between that span, "yes" and
"no"; with no admissible span the answer is "".

Since the threshold only decides which titles / sentences are admissible,
the graph computes once, per title / sentence global token, the best span
inside it (`sentence_best_spans`); choosing the answer for any threshold is
then an argmax over the admissible tokens (`select_answer` in the graph,
`decode_example` in Python). That is what makes the threshold search in
`search_threshold` cheap. `raw_outputs` maps one example's outputs back
onto the raw inputs of the `serve_raw` signature.

Answer text is cut from the original title / sentence string with the
wordpieces' byte offsets, so it is the exact original substring (case,
accents and spacing included), stripped of outer whitespace.
"""

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tasks.common.inputs import json_files
from tasks.hotpotqa import data
from tasks.hotpotqa import evaluate
from tasks.hotpotqa import features as features_lib

DEFAULT_THRESHOLD_GRID: Tuple[float, ...] = tuple(
    round(0.05 * i, 2) for i in range(1, 20))


# ------------------------------------------------------------------- in graph
def sentence_best_spans(start_probs: tf.Tensor, end_probs: tf.Tensor,
                        long_sentence_ids: tf.Tensor, global_kinds: tf.Tensor,
                        long_token_start: tf.Tensor, long_token_end: tf.Tensor,
                        max_answer_length: int) -> Dict[str, tf.Tensor]:
  """The best span inside each title / sentence global token.

  Args:
    start_probs, end_probs: float32 [B, L] span start / end probabilities.
    long_sentence_ids: int32 [B, L] global index of each long token's text.
    global_kinds: int32 [B, G] (`features.KIND_*`).
    long_token_start, long_token_end: int32 [B, L] byte offsets.
    max_answer_length: K, the longest span in wordpieces.

  Returns:
    span_score float32 [B, G]: max P(start) x P(end) over spans inside the
      token's text; -1 where there is none (not a title / sentence, or no
      wordpieces kept).
    span_start, span_end int32 [B, G]: the span's inclusive long positions.
    span_start_byte, span_end_byte int32 [B, G]: its byte range [start, end)
      in the text.
  """
  i32 = tf.int32
  long_len = tf.shape(start_probs)[1]
  global_len = tf.shape(global_kinds)[1]
  batch = tf.shape(start_probs)[0]
  is_text = tf.logical_or(
      tf.equal(global_kinds, features_lib.KIND_TITLE),
      tf.equal(global_kinds, features_lib.KIND_SENTENCE))  # [B, G]
  sent = long_sentence_ids
  token_in_text = tf.logical_and(
      sent >= 0,
      tf.gather(is_text, tf.maximum(sent, 0), batch_dims=1))  # [B, L]

  # [B, L, K]: span (i, i + k).
  offsets = tf.range(max_answer_length, dtype=i32)
  ends = tf.range(long_len)[:, tf.newaxis] + offsets  # [L, K]
  in_range = ends < long_len
  ends = tf.minimum(ends, long_len - 1)
  end_sent = tf.gather(sent, ends, axis=1)  # [B, L, K]
  valid = (in_range[tf.newaxis] & token_in_text[:, :, tf.newaxis] &
           tf.equal(end_sent, sent[:, :, tf.newaxis]))
  scores = start_probs[:, :, tf.newaxis] * tf.gather(end_probs, ends, axis=1)
  scores = tf.where(valid, scores, -1.0)
  best_k = tf.argmax(scores, axis=-1, output_type=i32)  # [B, L]
  best_at = tf.reduce_max(scores, axis=-1)  # [B, L]

  # Per global token: max over its start positions (first on ties).
  segments = tf.where(token_in_text, sent, global_len)  # G = "none"
  flat = (segments + tf.range(batch)[:, tf.newaxis] * (global_len + 1))
  num_segments = batch * (global_len + 1)
  seg_max = tf.math.unsorted_segment_max(best_at, flat, num_segments)
  is_best = tf.logical_and(tf.equal(best_at, tf.gather(seg_max, flat)),
                           token_in_text)
  positions = tf.broadcast_to(tf.range(long_len), tf.shape(sent))
  seg_start = tf.math.unsorted_segment_min(
      tf.where(is_best, positions, long_len), flat, num_segments)
  seg_max = tf.reshape(seg_max, [batch, global_len + 1])[:, :-1]
  seg_start = tf.reshape(seg_start, [batch, global_len + 1])[:, :-1]
  has_span = tf.logical_and(is_text, seg_start < long_len)
  span_start = tf.where(has_span, seg_start, 0)
  span_end = span_start + tf.gather(best_k, span_start, batch_dims=1)
  return {
      "span_score": tf.where(has_span, seg_max, -1.0),
      "span_start": tf.where(has_span, span_start, -1),
      "span_end": tf.where(has_span, span_end, -1),
      "span_start_byte": tf.where(
          has_span, tf.gather(long_token_start, span_start, batch_dims=1), -1),
      "span_end_byte": tf.where(
          has_span, tf.gather(long_token_end, span_end, batch_dims=1), -1),
  }


def select_answer(sp_probs: tf.Tensor, span_score: tf.Tensor,
                  threshold: float) -> tf.Tensor:
  """int32 [B]: global index of the text holding the answer span, or -1.

  Args:
    sp_probs: float32 [B, G] supporting-fact probabilities.
    span_score: float32 [B, G] from `sentence_best_spans`.
    threshold: supporting-fact threshold.
  """
  admissible = tf.logical_and(sp_probs >= threshold, span_score >= 0.0)
  masked = tf.where(admissible, span_score, -1.0)
  best = tf.argmax(masked, axis=-1, output_type=tf.int32)
  return tf.where(tf.reduce_any(admissible, axis=-1), best, -1)


def raw_outputs(feats: Mapping[str, tf.Tensor],
                out: Mapping[str, tf.Tensor], titles: tf.Tensor,
                sentences: tf.Tensor, num_sentences: tf.Tensor
                ) -> Dict[str, tf.Tensor]:
  """One example's model outputs mapped back onto the raw inputs."""
  i32 = tf.int32
  kinds = feats["global_kinds"]
  para = feats["global_paragraph_ids"]
  sent = feats["global_sentence_ids"]
  probs = out["sp_probs"]
  sent_starts = tf.cumsum(num_sentences, exclusive=True)  # [P]
  num_paras = tf.size(titles)
  num_sents = tf.size(sentences)

  def scatter(kind, index_fn, size):
    where = tf.where(tf.equal(kinds, kind))[:, 0]
    index = index_fn(tf.gather(para, where), tf.gather(sent, where))
    return tf.tensor_scatter_nd_update(
        tf.fill([size], -1.0), index[:, tf.newaxis], tf.gather(probs, where))

  flat_sentence = lambda p, s: tf.gather(sent_starts, p) + s  # noqa: E731
  answer_type = out["answer_type"]
  g = out["answer_global"]
  is_span = tf.logical_and(tf.equal(answer_type, data.SPAN), g >= 0)
  safe_g = tf.maximum(g, 0)
  # Clamped so that the unselected branches of tf.where index safely.
  g_para = tf.maximum(tf.gather(para, safe_g), 0)
  g_sent = tf.gather(sent, safe_g)
  start = tf.gather(out["span_start_byte"], safe_g)
  end = tf.gather(out["span_end_byte"], safe_g)
  texts = tf.concat([titles, sentences, [""]], axis=0)
  text_index = tf.where(
      is_span,
      tf.where(g_sent < 0, g_para,
               num_paras + flat_sentence(g_para, tf.maximum(g_sent, 0))),
      num_paras + num_sents)
  # Not a span: an empty cut of the "" sentinel (substr rejects positions
  # past the end).
  span_text = tf.strings.strip(tf.strings.substr(
      tf.gather(texts, text_index), tf.where(is_span, start, 0),
      tf.where(is_span, end - start, 0), unit="BYTE"))
  answer = tf.where(
      tf.equal(answer_type, data.YES), tf.constant("yes"),
      tf.where(tf.equal(answer_type, data.NO), tf.constant("no"),
               tf.where(is_span, span_text, tf.constant(""))))
  minus_one = tf.constant(-1, i32)
  return {
      "answer": answer,
      "answer_type": answer_type,
      "answer_type_probabilities": out["answer_type_probs"],
      "answer_paragraph": tf.where(is_span, g_para, minus_one),
      "answer_sentence": tf.where(is_span, g_sent, minus_one),
      "answer_start_byte": tf.where(is_span, start, minus_one),
      "answer_end_byte": tf.where(is_span, end, minus_one),
      "sentence_sp_probabilities": scatter(
          features_lib.KIND_SENTENCE, flat_sentence, num_sents),
      "title_sp_probabilities": scatter(
          features_lib.KIND_TITLE, lambda p, s: p, num_paras),
      "paragraph_sp_probabilities": scatter(
          features_lib.KIND_PARAGRAPH, lambda p, s: p, num_paras),
  }


# --------------------------------------------------------------------- Python
def _record_from_json(record_json: Any) -> data.HotpotRecord:
  if isinstance(record_json, bytes):
    record_json = record_json.decode("utf-8")
  raw = json.loads(record_json) if isinstance(record_json, str) else record_json
  return data.validate_record(raw, "<record_json>", 0)


def decode_example(prediction: Mapping[str, np.ndarray],
                   record: data.HotpotRecord,
                   threshold: float = 0.5) -> Tuple[str, List[List[Any]]]:
  """(answer text, [[title, sent_id], ...]) for one example.

  Args:
    prediction: one example's arrays: `sp_probs` [G], `answer_type` [] (or
      `answer_type_probs` [3]), `span_score`, `span_start_byte`,
      `span_end_byte`, `global_paragraph_ids`, `global_sentence_ids`,
      `global_kinds` [G].
    record: its record (the original strings).
    threshold: supporting-fact threshold.
  """
  sp_probs = np.asarray(prediction["sp_probs"])
  kinds = np.asarray(prediction["global_kinds"])
  para_ids = np.asarray(prediction["global_paragraph_ids"])
  sent_ids = np.asarray(prediction["global_sentence_ids"])
  predicted = sp_probs >= threshold
  sp = []
  for g in np.flatnonzero(predicted & (kinds == features_lib.KIND_SENTENCE)):
    sp.append([record.titles[int(para_ids[g])], int(sent_ids[g])])

  if "answer_type" in prediction:
    answer_type = int(prediction["answer_type"])
  else:
    answer_type = int(np.argmax(prediction["answer_type_probs"]))
  if answer_type == data.YES:
    return "yes", sp
  if answer_type == data.NO:
    return "no", sp
  score = np.asarray(prediction["span_score"])
  admissible = predicted & (score >= 0)
  if not admissible.any():
    return "", sp
  g = int(np.argmax(np.where(admissible, score, -1.0)))
  text = features_lib.text_of(record, int(para_ids[g]), int(sent_ids[g]))
  start = int(prediction["span_start_byte"][g])
  end = int(prediction["span_end_byte"][g])
  answer = text.encode("utf-8")[start:end].decode("utf-8", errors="ignore")
  return answer.strip(), sp



def predictions_json(examples: Sequence[Mapping[str, np.ndarray]],
                     records: Mapping[str, data.HotpotRecord],
                     threshold: float) -> Dict[str, Dict[str, Any]]:
  """The official submission object {"answer": {...}, "sp": {...}}."""
  answers, sps = {}, {}
  for example in examples:
    example_id = example["example_id"]
    if isinstance(example_id, bytes):
      example_id = example_id.decode("utf-8")
    answers[example_id], sps[example_id] = decode_example(
        example, records[example_id], threshold)
  return {"answer": answers, "sp": sps}


def records_of(examples: Sequence[Mapping[str, np.ndarray]]
               ) -> Dict[str, data.HotpotRecord]:
  """The records stored in the examples' `record_json`, by id."""
  out = {}
  for example in examples:
    record = _record_from_json(example["record_json"])
    out[record.id] = record
  return out


def search_threshold(examples: Sequence[Mapping[str, np.ndarray]],
                     records: Mapping[str, data.HotpotRecord],
                     gold: Sequence[Mapping[str, Any]],
                     grid: Sequence[float] = DEFAULT_THRESHOLD_GRID
                     ) -> Dict[str, Any]:
  """Official metrics at every threshold of `grid`; the best by joint F1.

  Returns:
    {"best_threshold", "best": metrics at it, "by_threshold": {t: metrics}}
    (ties on joint F1 go to the better sp F1, answer F1, then to the
    threshold nearest 0.5).
  """
  if not grid:
    raise ValueError("empty threshold grid")
  by_threshold = {}
  for threshold in grid:
    prediction = predictions_json(examples, records, threshold)
    by_threshold[float(threshold)] = evaluate.evaluate(prediction, gold)
  # Ties: better sp F1, then answer F1, then the threshold nearest 0.5.
  best = max(by_threshold, key=lambda t: (
      by_threshold[t]["joint_f1"], by_threshold[t]["sp_f1"],
      by_threshold[t]["f1"], -abs(t - 0.5)))
  return {"best_threshold": best, "best": by_threshold[best],
          "by_threshold": by_threshold}


def gold_of(records: Mapping[str, data.HotpotRecord],
            gold_file: Optional[str] = None) -> List[Dict[str, Any]]:
  """Gold records: the released file if given, else the labelled records.

  Raises:
    records.InputFileError: `gold_file` is missing or not a JSON array.
  """
  if gold_file:
    return json_files.load_json_array(gold_file)
  return [r.to_json() for r in records.values() if r.has_labels]
