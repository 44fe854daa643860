"""NQ decoding on hand-built window logits (`tasks.nq.decode`).

The document: 30 tokens (one wordpiece each unless said), candidates
c0 [0, 8), c1 [8, 16), c2 [16, 24), c3 [24, 30); token t has bytes
[10t, 10t + 5). Windows of L = 24: [CLS] q q [SEP] + 19 document positions
(4..22) + [SEP]; window w holds tokens 10w .. 10w + 18:
  window 0: c0, c1 whole; c2 cut (16..18)
  window 1: c1 cut (10..15); c2 whole; c3 cut (24..28)
  window 2: c2 cut (20..23); c3 whole
"""

import numpy as np
import pytest
import tensorflow as tf

from tasks.common import output_files
from tasks.nq import data
from tasks.nq import decode as D

L, G, Q = 24, 8, 2
FIRST = Q + 2  # first document position
CANDIDATES = [(0, 8), (8, 16), (16, 24), (24, 30)]


def window_features(doc_tokens, candidates=CANDIDATES):
  """Features of one window holding `doc_tokens` (one per wordpiece)."""
  dmap = np.full([L], -1, np.int32)
  dmap[FIRST:FIRST + len(doc_tokens)] = doc_tokens
  start_byte = np.where(dmap >= 0, 10 * dmap, -1).astype(np.int64)
  end_byte = np.where(dmap >= 0, 10 * dmap + 5, -1).astype(np.int64)
  glob = {k: np.full([G], -1, np.int32) for k in (
      "global_candidate_index", "global_candidate_long_start",
      "global_candidate_long_end", "global_candidate_doc_start",
      "global_candidate_doc_end")}
  glob.update({k: np.full([G], -1, np.int64) for k in (
      "global_candidate_start_byte", "global_candidate_end_byte")})
  g = Q + 2  # after CLS and the question's global tokens
  for index, (start, end) in enumerate(candidates):
    positions = np.flatnonzero((dmap >= start) & (dmap < end))
    if positions.size == 0:
      continue
    glob["global_candidate_index"][g] = index
    glob["global_candidate_long_start"][g] = positions[0]
    glob["global_candidate_long_end"][g] = positions[-1]
    glob["global_candidate_doc_start"][g] = start
    glob["global_candidate_doc_end"][g] = end
    glob["global_candidate_start_byte"][g] = 10 * start
    glob["global_candidate_end_byte"][g] = 10 * (end - 1) + 5
    g += 1
  return {"doc_token_map": dmap, "long_start_byte": start_byte,
          "long_end_byte": end_byte, **glob}


def position(doc_tokens, token):
  return FIRST + list(doc_tokens).index(token)


WINDOW_TOKENS = [list(range(0, 19)), list(range(10, 29)), list(range(20, 30))]


class Logits:
  """Four [W, L] heads (long start/end, short start/end), zero by default."""

  def __init__(self, num_windows=3, cls=0.0):
    self.heads = np.zeros([4, num_windows, L], np.float32)
    self.heads[:, :, 0] = cls

  def set(self, head, window, token, value):
    index = ("ls", "le", "ss", "se").index(head)
    self.heads[index, window, position(WINDOW_TOKENS[window], token)] = value
    return self


def run_windows(logits, answer_type_logits=None, k=4, score_mode="difference",
                windows=WINDOW_TOKENS):
  feats = [window_features(t) for t in windows]
  batch = {k_: tf.constant(np.stack([f[k_] for f in feats])) for k_ in feats[0]}
  heads = [tf.constant(h) for h in logits.heads]
  out = D.window_answers(*heads, batch, max_short_answer_length=k,
                         score_mode=score_mode)
  out = {k_: v.numpy() for k_, v in out.items()}
  num = len(windows)
  if answer_type_logits is None:
    answer_type_logits = np.zeros([num, 5], np.float32)
    answer_type_logits[:, data.SHORT] = 1.0
  out["answer_type_logits"] = np.asarray(answer_type_logits, np.float32)
  out["example_id"] = np.full([num], -7, np.int64)
  out["window_index"] = np.arange(num, dtype=np.int32)
  return out


def python_and_graph(out):
  """The Python prediction; asserts the in-graph document answer agrees."""
  pred = D.document_prediction(-7, output_files.unbatch(out))
  doc = D.document_answer(
      {k: tf.constant(out[k]) for k in D.WINDOW_OUTPUTS},
      tf.constant(out["answer_type_logits"]))
  doc = {k: v.numpy() for k, v in doc.items()}
  la = pred["long_answer"]
  assert [la["start_token"], la["end_token"]] == [
      doc["long_start_token"], doc["long_end_token"]]
  if la["start_byte"] >= 0:
    assert [la["start_byte"], la["end_byte"]] == [
        doc["long_start_byte"], doc["long_end_byte"]]
  assert pred["long_answer_score"] == pytest.approx(float(doc["long_score"]))
  assert pred["short_answers_score"] == pytest.approx(
      float(doc["short_score"]))
  assert pred["yes_no_answer"] == doc["yes_no_answer"].decode()
  shorts = [[s["start_token"], s["end_token"]] for s in pred["short_answers"]]
  graph_short = [int(doc["short_start_token"]), int(doc["short_end_token"])]
  assert shorts == ([graph_short] if graph_short[0] >= 0 else [])
  return pred, doc


def test_long_answer_from_the_window_holding_it_whole():
  logits = Logits()
  # c2 scores best where it is cut (window 0: its tokens 16..18): ignored.
  logits.set("ls", 0, 16, 9.0).set("le", 0, 18, 9.0)
  # c2 whole in window 1: start at token 16, end at token 23.
  logits.set("ls", 1, 16, 3.0).set("le", 1, 23, 2.0)
  # c0 in window 0, less.
  logits.set("ls", 0, 0, 2.0).set("le", 0, 7, 2.0)
  out = run_windows(logits)
  np.testing.assert_array_equal(out["long_candidate"], [0, 2, 3])
  np.testing.assert_allclose(out["long_score"], [4.0, 5.0, 0.0])
  pred, doc = python_and_graph(out)
  assert pred["long_answer"] == {"start_token": 16, "end_token": 24,
                                 "start_byte": 160, "end_byte": 235}
  assert pred["long_answer_score"] == pytest.approx(5.0)
  assert doc["window"] == 1 and doc["long_candidate"] == 2


def test_scores_are_relative_to_the_cls_logits():
  logits = Logits(cls=1.5)  # every head's [CLS] logit
  logits.set("ls", 1, 16, 3.0).set("le", 1, 23, 2.0)
  out = run_windows(logits)
  # (3 - 1.5) + (2 - 1.5); the short heads are 0 inside c2: 2 x (0 - 1.5).
  assert out["long_score"][1] == pytest.approx(2.0)
  assert out["short_score"][1] == pytest.approx(-3.0)
  # The original's ratio: 3 / 1.5 + 2 / 1.5.
  ratio = run_windows(logits, score_mode="ratio")
  assert ratio["long_score"][1] == pytest.approx(10 / 3)
  with pytest.raises(ValueError, match="score_mode"):
    run_windows(logits, score_mode="max")


def test_short_answer_inside_the_long_answer_within_the_length_limit():
  logits = Logits()
  logits.set("ls", 1, 16, 3.0).set("le", 1, 23, 2.0)
  # The best short span overall lies in c1 (not the chosen long answer).
  logits.set("ss", 1, 12, 9.0).set("se", 1, 13, 9.0)
  # Inside c2: start 17 (4.0) .. end 22 (5.0) is 6 wordpieces > K = 4;
  # 17 .. 20 (4.0 + 1.0) is the best of 4 wordpieces or fewer (18 .. 20:
  # 4.0, 17 .. 19: 3.0).
  logits.set("ss", 1, 17, 4.0).set("se", 1, 22, 5.0)
  logits.set("ss", 1, 18, 3.0).set("se", 1, 20, 1.0)
  logits.set("se", 1, 19, -1.0)
  out = run_windows(logits, k=4)
  pred, _ = python_and_graph(out)
  assert pred["short_answers"] == [{"start_token": 17, "end_token": 21,
                                    "start_byte": 170, "end_byte": 205}]
  assert pred["short_answers_score"] == pytest.approx(5.0)
  # With K = 6 the long span 17..22 fits.
  pred, _ = python_and_graph(run_windows(logits, k=6))
  assert pred["short_answers"][0]["start_token"] == 17
  assert pred["short_answers"][0]["end_token"] == 23


def test_short_answer_start_not_after_end_and_single_token():
  logits = Logits()
  logits.set("ls", 1, 16, 3.0).set("le", 1, 23, 2.0)
  # End logits peak before the start peak: no reversed span.
  logits.set("ss", 1, 20, 6.0).set("se", 1, 18, 5.0)
  pred, _ = python_and_graph(run_windows(logits))
  span = pred["short_answers"][0]
  assert span["start_token"] < span["end_token"]
  assert [span["start_token"], span["end_token"]] == [20,
                                                      21]  # 6 + 0 beats 0 + 5


def test_short_answer_snaps_to_whole_document_tokens():
  """Token 17 has three wordpieces; a span from its 2nd ends up whole."""
  tokens = list(range(10, 17)) + [17, 17, 17] + list(range(18, 27))
  feats = window_features(tokens)
  logits = np.zeros([4, 1, L], np.float32)
  pos = {t: FIRST + tokens.index(t) for t in set(tokens)}
  logits[0, 0, pos[16]] = logits[1, 0, pos[23]] = 3.0
  logits[2, 0, pos[17] + 1] = 4.0  # the middle wordpiece of token 17
  logits[3, 0, pos[18]] = 4.0
  batch = {k: tf.constant(v[np.newaxis]) for k, v in feats.items()}
  out = D.window_answers(*[tf.constant(h) for h in logits], batch,
                         max_short_answer_length=8)
  assert int(out["short_start_token"][0]) == 17
  assert int(out["short_end_token"][0]) == 19
  assert int(out["short_start_byte_pred"][0]) == 170
  assert int(out["short_end_byte_pred"][0]) == 185


def test_yes_no_from_the_chosen_window_replaces_the_short_answer():
  logits = Logits()
  logits.set("ls", 1, 16, 3.0).set("le", 1, 23, 2.0)
  logits.set("ss", 1, 18, 3.0).set("se", 1, 18, 3.0)
  types = np.zeros([3, 5], np.float32)
  types[0, data.NO] = 5.0  # another window's NO is not read
  types[1, data.YES] = 5.0
  pred, doc = python_and_graph(run_windows(logits, types))
  assert pred["yes_no_answer"] == "YES"
  assert pred["short_answers"] == []
  assert pred["long_answer"]["start_token"] == 16
  assert pred["short_answers_score"] == pytest.approx(6.0)  # kept (original)
  assert doc["answer_type"] == data.YES
  types[1] = 0.0
  types[1, data.NO] = 5.0
  pred, _ = python_and_graph(run_windows(logits, types))
  assert pred["yes_no_answer"] == "NO"
  types[1] = 0.0
  types[1, data.LONG] = 5.0  # long only: the short span stays (the original)
  pred, _ = python_and_graph(run_windows(logits, types))
  assert pred["yes_no_answer"] == "NONE"
  assert pred["short_answers"][0]["start_token"] == 18


def test_null_without_eligible_candidates():
  # Only the cut pieces: window 1 holds c1, c2, c3 partly and c2 whole, so
  # keep window 1 out and give window 0 only tokens 4..11 (c0 and c1 cut).
  windows = [list(range(4, 12))]
  out = run_windows(Logits(1), windows=windows)
  assert out["long_candidate"][0] == -1 and out["short_start"][0] == -1
  assert out["long_score"][0] == D.NO_ANSWER_SCORE
  pred, doc = python_and_graph(out)
  assert pred["long_answer"] == D.NULL_SPAN
  assert pred["short_answers"] == [] and pred["yes_no_answer"] == "NONE"
  assert pred["long_answer_score"] == D.NO_ANSWER_SCORE
  assert doc["window"] == -1


def test_ties_go_to_the_first_window_and_missing_bytes_stay_null():
  logits = Logits()
  logits.set("ls", 0, 8, 1.0).set("le", 0, 15, 1.0)  # c1 in window 0
  logits.set("ls", 1, 16, 1.0).set("le", 1, 23, 1.0)  # c2 in window 1
  out = run_windows(logits)
  out["long_start_byte_pred"][:] = -1  # e.g. the simplified format
  pred, _ = python_and_graph(out)
  assert pred["long_answer"] == {"start_token": 8, "end_token": 16,
                                 "start_byte": -1, "end_byte": -1}


def test_predictions_json_groups_windows_and_fills_ids():
  logits = Logits()
  logits.set("ls", 1, 16, 3.0).set("le", 1, 23, 2.0)
  out = run_windows(logits)
  other = {k: v[:1].copy() for k, v in out.items()}
  other["example_id"][:] = 5
  merged = {k: np.concatenate([out[k][::-1], other[k]]) for k in out}
  result = D.predictions_json(output_files.unbatch(merged), example_ids=[11, 5])
  ids = [p["example_id"] for p in result["predictions"]]
  assert ids == [11, 5, -7]
  by_id = {p["example_id"]: p for p in result["predictions"]}
  assert by_id[11]["long_answer"] == D.NULL_SPAN
  assert by_id[-7]["long_answer"]["start_token"] == 16
  assert by_id[5]["long_answer"]["start_token"] == 0  # c0 in its window 0


def test_mask_long_logits_keeps_document_and_cls():
  dmap = tf.constant([[-1, -1, -1, 0, 1, -1]])
  masked = D.mask_long_logits(tf.ones([1, 6]), dmap).numpy()[0]
  np.testing.assert_array_equal(masked > D.NEG_INF / 2,
                                [True, False, False, True, True, False])


def test_span_text_joins_the_non_html_tokens():
  tokens = tf.constant(["<P>", "a", "b", "</P>", "c"])
  is_html = tf.constant([True, False, False, True, False])
  assert D.span_text(tokens, is_html, 0, 4).numpy() == b"a b"
  assert D.span_text(tokens, is_html, 2, 5).numpy() == b"b c"
  assert D.span_text(tokens, is_html, -1, -1).numpy() == b""
