"""Tests for tasks.nq.features: windows, global tokens, labels, side inputs
(the task's "breakpoints" source over the features), special ids."""

from typing import Tuple

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.config import EtcConfig
from etc_realformer.errors import UserInputError
from tasks.common.featurization import tokenization
from tasks.nq import data
from tasks.nq import features as F
from tasks.nq import task
from tokenization_testing import train_sentencepiece

SPECIAL = (["[PAD]"] + [f"[unused{i}]" for i in range(99)] +
           ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
           [f"[unused{i}]" for i in range(99, 104)])
WORDS = ["what", "is", "the", "x", "who", "was", "it", "title", "a", "b", "c",
         "d", "e", "f", "g", "h", "cat", "##s", "w", "y", "z", "."]
HTML_START, HTML_END, CLS, SEP, UNK = 107, 108, 101, 102, 100

# Document: <H1> title </H1> (outside every candidate), a paragraph (cand 0,
# top level; "cats" is two wordpieces), a table (cand 1, top level) with a
# row (cand 2, nested), a paragraph (cand 3, top level).
TOKENS = (["<H1>", "title", "</H1>"] +
          ["<P>", "a", "b", "c", "cats", "d", "e", "f", "g", "h", "w", "</P>"] +
          ["<Table>", "<Tr>", "<Td>", "y", "</Td>", "</Tr>", "</Table>"] +
          ["<P>", "a", "b", "c", "d", "e", "f", "z", "</P>"])
CANDIDATES = [(3, 15, True), (15, 22, True), (16, 21, False), (22, 31, True)]
QUESTION = "what is the x"
Q = 4  # question wordpieces


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("vocab") / "vocab.txt")
  tokenization.write_vocab(path, SPECIAL + WORDS)
  return path


_FEATURIZERS = {}


def featurizer(vocab, long_seq_len=24, global_seq_len=16, stride=8,
               max_question_len=4):
  key = (vocab, long_seq_len, global_seq_len, stride, max_question_len)
  if key not in _FEATURIZERS:
    _FEATURIZERS[key] = F.NqFeaturizer(
        vocab, long_seq_len=long_seq_len, global_seq_len=global_seq_len,
        stride=stride, max_question_len=max_question_len)
  return _FEATURIZERS[key]


def make_record(question=QUESTION, annotation=None, simplified=False):
  tokens, at = [], 0
  for t in TOKENS:
    tokens.append(dict(token=t, html_token=t.startswith("<"),
                       start_byte=at, end_byte=at + len(t)))
    at += len(t) + 1
  cands = []
  for s, e, top in CANDIDATES:
    cands.append(dict(start_token=s, end_token=e, top_level=top,
                      start_byte=tokens[s]["start_byte"],
                      end_byte=tokens[e - 1]["end_byte"]))
  raw = dict(example_id=-42, question_text=question,
             document_tokens=tokens, long_answer_candidates=cands,
             annotations=[annotation] if annotation else [])
  if simplified:
    raw = dict(raw, document_text=" ".join(TOKENS), long_answer_candidates=[
        {k: v for k, v in c.items() if "byte" not in k} for c in cands])
    del raw["document_tokens"]
  return data.validate_record(raw, "test", 1)


def annotation(long=None, short=None, yes_no="NONE"):
  def span(s):
    return dict(start_token=s[0], end_token=s[1])
  cand = -1
  if long:
    cand = [c[:2] for c in CANDIDATES].index(tuple(long))
  return dict(long_answer=dict(span(long or (-1, -1)), candidate_index=cand),
              short_answers=[span(short)] if short else [],
              yes_no_answer=yes_no)


# Document token of each document wordpiece (kept tokens only: 3..30).
WORDPIECE_TOKENS = [i for i in range(3, 31)
                    for _ in range(2 if TOKENS[i] == "cats" else 1)]


def test_windows_and_stride(vocab):
  f = featurizer(vocab)
  feats, stats = f.featurize_record(make_record())
  n = len(WORDPIECE_TOKENS)  # 29
  doc_len = 24 - Q - 3
  expected_starts = list(range(0, max(n - doc_len, 0) + 8, 8))
  assert stats["windows"] == len(expected_starts) == 3
  assert stats["document_wordpieces"] == n
  assert stats["tokens_outside_top_level_candidates"] == 3
  np.testing.assert_array_equal(feats["window_index"], [0, 1, 2])
  np.testing.assert_array_equal(feats["num_windows"], [3, 3, 3])
  np.testing.assert_array_equal(feats["example_id"], [-42] * 3)
  for w, start in enumerate(expected_starts):
    expected = WORDPIECE_TOKENS[start:start + doc_len]
    ids = feats["token_ids"][w]
    assert ids[0] == CLS and ids[Q + 1] == SEP
    end = Q + 2 + len(expected)
    np.testing.assert_array_equal(feats["doc_token_map"][w][Q + 2:end],
                                  expected)
    assert (feats["doc_token_map"][w][:Q + 2] == -1).all()
    assert (feats["doc_token_map"][w][end:] == -1).all()
    assert ids[end] == SEP and (ids[end + 1:] == 0).all()
    np.testing.assert_array_equal(np.flatnonzero(feats["long_breakpoints"][w]),
                                  [end])
    assert (feats["segment_ids"][w] == 0).all()


def test_question_truncation(vocab):
  f = featurizer(vocab)
  feats, stats = f.featurize_record(make_record("what is the x who was"))
  assert stats["question_tokens_dropped"] == 2
  words = tokenization.read_vocab(vocab)
  np.testing.assert_array_equal(
      feats["token_ids"][0][1:Q + 1],
      [words.index(w) for w in ("what", "is", "the", "x")])
  assert feats["token_ids"][0][Q + 1] == SEP


def test_html_tokens_become_special_ids(vocab):
  f = featurizer(vocab)
  feats, _ = f.featurize_record(make_record())
  for w in range(feats["token_ids"].shape[0]):
    for pos, tok in enumerate(feats["doc_token_map"][w]):
      if tok < 0:
        continue
      text = TOKENS[tok]
      if text.startswith("</"):
        assert feats["token_ids"][w][pos] == HTML_END
      elif text.startswith("<"):
        assert feats["token_ids"][w][pos] == HTML_START
      else:
        assert feats["token_ids"][w][pos] not in (HTML_START, HTML_END, UNK)


def test_doc_token_map_round_trip(vocab):
  f = featurizer(vocab)
  feats, _ = f.featurize_record(make_record())
  words = tokenization.read_vocab(vocab)
  seen = {}
  for w in range(feats["token_ids"].shape[0]):
    for pos, tok in enumerate(feats["doc_token_map"][w]):
      if tok >= 0:
        seen.setdefault((w, int(tok)), []).append(
            words[feats["token_ids"][w][pos]])
  # Every kept token is in some window, all its wordpieces together.
  assert {t for _, t in seen} == set(range(3, 31))
  assert seen[(0, 7)] == ["cat", "##s"]
  for (_, tok), pieces in seen.items():
    if not TOKENS[tok].startswith("<"):
      assert "".join(p.lstrip("#") for p in pieces) == TOKENS[tok]


def test_global_tokens_one_per_top_level_candidate(vocab):
  f = featurizer(vocab)
  record = make_record()
  feats, stats = f.featurize_record(record)
  pre = Q + 2
  assert stats["candidates_without_global_token"] == 0
  # Window 0 holds wordpieces 0..16: candidate 0 (13) and part of 1 (4).
  g = {k: v[0] for k, v in feats.items()}
  np.testing.assert_array_equal(g["global_token_ids"][:pre + 3],
                                [CLS] + [35] * (Q + 1) + [1, 1, 0])
  assert (g["global_token_ids"][pre + 3:] == 0).all()
  np.testing.assert_array_equal(np.flatnonzero(g["global_breakpoints"]),
                                [pre + 2])
  np.testing.assert_array_equal(g["global_candidate_index"][:pre + 4],
                                [-1] * pre + [0, 1, -1, -1])
  assert 2 not in feats["global_candidate_index"]  # nested: no token
  np.testing.assert_array_equal(g["global_candidate_long_start"][pre:pre + 2],
                                [pre, pre + 13])
  np.testing.assert_array_equal(g["global_candidate_long_end"][pre:pre + 2],
                                [pre + 12, pre + 16])
  np.testing.assert_array_equal(g["global_candidate_doc_start"][pre:pre + 2],
                                [3, 15])
  np.testing.assert_array_equal(g["global_candidate_doc_end"][pre:pre + 2],
                                [15, 22])
  c0 = record.candidates[0].span
  assert g["global_candidate_start_byte"][pre] == c0.start_byte
  assert g["global_candidate_end_byte"][pre] == c0.end_byte
  assert (g["global_candidate_doc_start"][:pre] == -1).all()
  # sentence ids: CLS, question, [SEP], then the candidates' tokens.
  expected = list(range(pre)) + [pre] * 13 + [pre + 1] * 4 + [pre + 2] * 1
  np.testing.assert_array_equal(g["sentence_ids"][:len(expected)], expected)
  np.testing.assert_array_equal(g["long_candidate_index"][pre:pre + 17],
                                [0] * 13 + [1] * 4)
  # Long bytes are the mapped token's bytes.
  for pos, tok in enumerate(g["doc_token_map"]):
    want = record.token_start_byte[tok] if tok >= 0 else -1
    assert g["long_start_byte"][pos] == want
  # Every window: candidate tokens' ranges hold exactly their wordpieces.
  for w in range(feats["token_ids"].shape[0]):
    for slot in np.flatnonzero(feats["global_candidate_index"][w] >= 0):
      c = feats["global_candidate_index"][w][slot]
      a = feats["global_candidate_long_start"][w][slot]
      b = feats["global_candidate_long_end"][w][slot]
      np.testing.assert_array_equal(
          np.flatnonzero(feats["long_candidate_index"][w] == c),
          np.arange(a, b + 1))
      assert (feats["sentence_ids"][w][a:b + 1] == slot).all()


def test_full_global_input_shares_the_last_token(vocab):
  # G = q + 3: room for one candidate token only.
  f = featurizer(vocab, global_seq_len=Q + 3)
  feats, stats = f.featurize_record(make_record())
  g = {k: v[0] for k, v in feats.items()}
  last = Q + 2
  assert stats["candidates_without_global_token"] >= 1
  assert stats["windows_global_full"] >= 1
  np.testing.assert_array_equal(g["global_candidate_index"], [-1] * last + [0])
  np.testing.assert_array_equal(g["global_breakpoints"], [0] * last + [1])
  assert g["global_candidate_long_end"][last] == last + 12  # its own only
  real = np.flatnonzero(g["token_ids"])
  assert (g["sentence_ids"][real[real >= last]] == last).all()


# Window segments for the default test featurizer (L 24, q 4, stride 8):
# doc_len = 24 - 4 - 3 = 17, windows hold document wordpieces [0, 16],
# [8, 24], [16, 28]; wordpiece k sits at long position 6 + k - 8 * w
# (6 = [CLS] + 4 question wordpieces + [SEP]). Document token t >= 8 is
# wordpiece t - 2 ("cats", token 7, is wordpieces 4 and 5).
# The original's rule, applied by hand: a start is the window's first
# wordpiece of the span's first token, an end the window's last wordpiece of
# the span's last token (end_token - 1), each 0 when the window lacks that
# token; a short (long) example is null where both its short (long) ends
# are 0; yes / no never becomes null.
@pytest.mark.parametrize("ann,types,long_pos,short_pos", [
    # Long = candidate 0 (tokens 3..14, wordpieces 0..12), short "b c"
    # (wordpieces 2..3): window 1 holds only the long answer's end, and the
    # short example is null there.
    (annotation(long=(3, 15), short=(5, 7)),
     [data.SHORT, data.NULL, data.NULL],
     [(6, 18), (0, 10), (0, 0)], [(8, 9), (0, 0), (0, 0)]),
    # Long = candidate 3 (wordpieces 20..28): window 1 holds its start only
    # (its end is cut by the window's end edge) and keeps the type.
    (annotation(long=(22, 31)), [data.NULL, data.LONG, data.LONG],
     [(0, 0), (18, 0), (10, 18)], [(0, 0)] * 3),
    # Candidate 1 (wordpieces 13..19): start only in window 0, whole in
    # window 1, end only in window 2 (cut by its start edge): long in all.
    (annotation(long=(15, 22)), [data.LONG] * 3,
     [(19, 0), (11, 17), (0, 9)], [(0, 0)] * 3),
    # Short "e f g" (wordpieces 7..9) across window 1's start edge (8).
    (annotation(long=(3, 15), short=(9, 12)),
     [data.SHORT, data.SHORT, data.NULL],
     [(6, 18), (0, 10), (0, 0)], [(13, 15), (0, 7), (0, 0)]),
    # Short "<Td> y </Td>" (wordpieces 15..17) across window 0's end edge
    # (16) and window 2's start edge (16).
    (annotation(long=(15, 22), short=(17, 20)), [data.SHORT] * 3,
     [(19, 0), (11, 17), (0, 9)], [(21, 0), (13, 15), (0, 7)]),
    # Yes/no: the type stays in every window, even without either end.
    (annotation(long=(22, 31), yes_no="YES"), [data.YES] * 3,
     [(0, 0), (18, 0), (10, 18)], [(0, 0)] * 3),
    (annotation(), [data.NULL] * 3, [(0, 0)] * 3, [(0, 0)] * 3),
])
def test_labels_in_and_out_of_window(vocab, ann, types, long_pos, short_pos):
  f = featurizer(vocab)
  feats, _ = f.featurize_record(make_record(annotation=ann))
  np.testing.assert_array_equal(feats["answer_type"], types)
  for kind, want in (("long", long_pos), ("short", short_pos)):
    got = list(zip(feats[f"{kind}_start"].tolist(),
                   feats[f"{kind}_end"].tolist()))
    assert got == want, kind


# A featurizer whose windows cut "cats" (token 7, wordpieces 4 and 5):
# L 12 -> doc_len 12 - 4 - 3 = 5, stride 5, windows hold wordpieces [0, 4],
# [5, 9], [10, 14], ...; wordpiece k sits at long position 6 + k - 5 * w.
@pytest.mark.parametrize("short,short_pos,types", [
    # "cats d" (tokens 7..8): window 0 holds the first piece of "cats" (its
    # start, at wordpiece 4) but not "d"; window 1 starts at the second
    # piece of "cats", which is its start there.
    ((7, 9), [(10, 0), (6, 7)], [data.SHORT, data.SHORT]),
    # "b c cats" (tokens 5..7): window 0 ends at the first piece of "cats"
    # (its end there), window 1 holds only the last piece (its end).
    ((5, 8), [(8, 10), (0, 6)], [data.SHORT, data.SHORT]),
])
def test_labels_of_a_token_cut_by_the_window_edge(vocab, short, short_pos,
                                                  types):
  f = featurizer(vocab, long_seq_len=12, stride=5)
  feats, stats = f.featurize_record(
      make_record(annotation=annotation(long=(3, 15), short=short)))
  assert stats["windows"] == 6
  # Long = candidate 0 (wordpieces 0..12): start in window 0 (position 6),
  # end in window 2 (wordpiece 12 -> 6 + 12 - 10 = 8), nothing elsewhere.
  want_long = [(6, 0), (0, 0), (0, 8)] + [(0, 0)] * 3
  got_long = list(zip(feats["long_start"].tolist(), feats["long_end"].tolist()))
  assert got_long == want_long
  got_short = list(zip(feats["short_start"].tolist(),
                       feats["short_end"].tolist()))
  assert got_short == short_pos + [(0, 0)] * 4
  # Window 2 holds the long answer's end only: a short example is null.
  np.testing.assert_array_equal(feats["answer_type"],
                                types + [data.NULL] * 4)


def original_rule(dmap: np.ndarray,
                  span: Tuple[int, int]) -> Tuple[int, int]:
  """The original's per-window lookup over one window's doc_token_map."""
  start = np.flatnonzero(dmap == span[0])
  end = np.flatnonzero(dmap == span[1] - 1)
  return (int(start[0]) if start.size else 0,
          int(end[-1]) if end.size else 0)


def test_labels_follow_the_original_rule_for_every_short_span(vocab):
  """Every short span of up to 4 kept tokens, on windows cutting "cats"."""
  f = featurizer(vocab, long_seq_len=12, stride=5)
  for s in range(3, 31):
    for e in range(s + 1, min(s + 5, 32)):
      ann = annotation(long=(3, 15), short=(s, e))
      feats, _ = f.featurize_record(make_record(annotation=ann))
      for w, dmap in enumerate(feats["doc_token_map"]):
        start, end = original_rule(dmap, (s, e))
        assert (feats["short_start"][w], feats["short_end"][w]) == (
            start, end), (s, e, w)
        want = data.NULL if start == end == 0 else data.SHORT
        assert feats["answer_type"][w] == want, (s, e, w)


def test_unlabelled_example(vocab):
  feats, _ = featurizer(vocab).featurize_record(make_record())
  assert (feats["answer_type"] == -1).all()
  for k in ("long_start", "long_end", "short_start", "short_end"):
    assert (feats[k] == 0).all()


def test_simplified_format_gives_the_same_windows(vocab):
  f = featurizer(vocab)
  full, _ = f.featurize_record(make_record())
  simple, _ = f.featurize_record(make_record(simplified=True))
  for name in F.feature_spec():
    if "byte" in name:
      assert (simple[name] == -1).all()
    else:
      np.testing.assert_array_equal(full[name], simple[name], err_msg=name)


def test_spec_shapes_and_side_inputs(vocab):
  f = featurizer(vocab)
  feats, _ = f.featurize_record(make_record())
  spec = F.feature_spec(24, 16)
  assert set(feats) == set(spec)
  assert set(F.MODEL_FEATURES + F.LABEL_FEATURES) <= set(spec)
  for name, (dtype, shape) in spec.items():
    assert feats[name].shape == (3, *shape), name
    assert feats[name].dtype == dtype.as_numpy_dtype, name
  config = EtcConfig(vocab_size=200, hidden_size=8, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=8,
                     local_radius=3, relative_pos_max_distance=2)
  nq = task.NaturalQuestionsTask(model_config=config, long_seq_len=24,
                                 global_seq_len=16)
  side = nq.side_inputs({k: tf.constant(feats[k]) for k in F.MODEL_FEATURES})
  assert side["l2l_att_mask"].shape == (3, 24, 7)
  assert side["g2l_att_mask"].shape == (3, 16, 24)
  # Padding global tokens see no real long token, real ones do.
  g2l = side["g2l_att_mask"].numpy()
  real_long = feats["token_ids"][0] > 0
  assert g2l[0, Q + 5:][:, real_long].sum() == 0
  assert g2l[0, :Q + 5][:, real_long].all()


def test_html_candidates_and_document_text():
  tokens = tf.constant(TOKENS)
  is_html = tf.constant([t.startswith("<") for t in TOKENS])
  starts, ends, top = F.html_candidates(tokens, is_html)
  assert list(zip(starts.numpy(), ends.numpy())) == [(3, 15), (15, 22),
                                                     (22, 31)]
  assert top.numpy().all()
  text_tokens, text_html = F.split_document_text(tf.constant(
      '<P> a b </P> <Td_colspan="2"> c'))
  assert text_tokens.numpy().tolist() == [b"<P>", b"a", b"b", b"</P>",
                                          b'<Td_colspan="2">', b"c"]
  assert text_html.numpy().tolist() == [True, False, False, True, True, False]
  # No candidate tags (plain text): the whole document; unclosed: to the end.
  s, e, _ = F.html_candidates(tf.constant(["a", "b"]),
                              tf.constant([False, False]))
  assert (s.numpy().tolist(), e.numpy().tolist()) == ([0], [2])
  s, e, _ = F.html_candidates(tf.constant(["<Ul>", "<Li>", "a", "</Li>"]),
                              tf.constant([True, True, False, True]))
  assert (s.numpy().tolist(), e.numpy().tolist()) == ([0], [4])


def test_featurize_raw_tokens_matches_record(vocab):
  f = featurizer(vocab)
  feats_record, _ = f.featurize_record(make_record())
  raw = f.featurize(QUESTION, TOKENS, [t.startswith("<") for t in TOKENS],
                    [c[0] for c in CANDIDATES], [c[1] for c in CANDIDATES],
                    [c[2] for c in CANDIDATES], example_id=-42)
  for name in ("token_ids", "sentence_ids", "global_token_ids",
               "doc_token_map", "global_candidate_index"):
    np.testing.assert_array_equal(raw[name].numpy(), feats_record[name])


def test_sentencepiece_needs_its_special_ids(tmp_path):
  model = train_sentencepiece(tmp_path / "sp.model",
                              [" ".join(WORDS[:16])] * 20, vocab_size=40)
  tok = tokenization.SentencePieceTokenizer(model)
  with pytest.raises(UserInputError, match="unused_63"):
    F.NqTokenIds.for_tokenizer(tok)
  f = F.NqFeaturizer(tokenizer=tok, long_seq_len=24, global_seq_len=16,
                     stride=8, max_question_len=4,
                     token_ids=F.NqTokenIds(cls=1, sep=2, html_start=3,
                                            html_end=4, global_cls=1))
  feats, _ = f.featurize_record(make_record())
  assert feats["token_ids"][0][0] == 1
  assert 3 in feats["token_ids"][0] and 4 in feats["token_ids"][0]


def test_bad_settings(vocab):
  with pytest.raises(UserInputError, match="global_seq_len"):
    F.NqFeaturizer(vocab, long_seq_len=64, global_seq_len=6,
                   max_question_len=4, stride=8)
  with pytest.raises(UserInputError, match="stride"):
    F.NqFeaturizer(vocab, long_seq_len=24, global_seq_len=16,
                   max_question_len=4, stride=30)
