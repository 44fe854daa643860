"""Tests for tasks.hotpotqa.features: segments, offsets, truncation, labels."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.config import EtcConfig
from etc_realformer.features import side_input_sources
from hotpotqa_testing import WORDS
from hotpotqa_testing import record as _record
from tasks.hotpotqa import data
from tasks.hotpotqa import features as F
from tokenization_testing import train_sentencepiece
from tokenization_testing import write_test_vocab


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return write_test_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt",
                          WORDS)


_FEATURIZERS = {}


def _featurizer(vocab, long_seq_len, global_seq_len):
  """One featurizer (and one trace of its function) per size and vocab."""
  key = (vocab, long_seq_len, global_seq_len)
  if key not in _FEATURIZERS:
    _FEATURIZERS[key] = F.HotpotFeaturizer(
        vocab, long_seq_len=long_seq_len, global_seq_len=global_seq_len)
  return _FEATURIZERS[key]


def _ids(vocab_path, text):
  with open(vocab_path) as f:
    v = [line.rstrip("\n") for line in f]
  return [v.index(w) for w in text.split()]


def test_hand_checked_segments_and_labels(vocab):
  featurizer = _featurizer(vocab, 30, 14)
  cls = _ids(vocab, "[CLS]")[0]
  assert featurizer.global_token_ids == F.GlobalTokenIds(
      cls=cls, sentence=1, question=3, paragraph=5)
  f, stats, reason = featurizer.featurize_record(_record(), is_training=True)
  assert reason is None
  assert not any(stats.values())
  # Global: CLS, 4 question pieces (who is x ?), paragraph 0 = paragraph,
  # title, 2 sentences; paragraph 1 = paragraph, title, 1 sentence; padding.
  np.testing.assert_array_equal(
      f["global_token_ids"], [cls, 3, 3, 3, 3, 5, 1, 1, 1, 5, 1, 1, 0, 0])
  np.testing.assert_array_equal(f["global_segment_ids"], [0] * 14)
  np.testing.assert_array_equal(
      f["global_kinds"], [1, 2, 2, 2, 2, 3, 4, 5, 5, 3, 4, 5, 0, 0])
  np.testing.assert_array_equal(
      f["global_paragraph_breakpoints"],
      [1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0])
  np.testing.assert_array_equal(
      f["global_paragraph_ids"], [-1] * 5 + [0] * 4 + [1] * 3 + [-1] * 2)
  np.testing.assert_array_equal(
      f["global_sentence_ids"], [-1] * 7 + [0, 1, -1, -1, 0, -1, -1])
  np.testing.assert_array_equal(f["ignore_hard_g2l_mask"], [1] + [0] * 13)
  # Long: CLS, question, title 0, sentence 0.0, 0.1, title 1, sentence 1.0.
  expected = (_ids(vocab, "[CLS] who is x ? john doe john doe was born in "
                   "paris . bob is x . paris paris is the city of light .")
              + [0] * 4)
  np.testing.assert_array_equal(f["token_ids"], expected)
  np.testing.assert_array_equal(
      f["segment_ids"],
      [1, 3, 3, 3, 3, 2, 2] + [1] * 11 + [2] + [1] * 7 + [0] * 4)
  np.testing.assert_array_equal(
      f["long_sentence_ids"],
      [-1, 1, 2, 3, 4, 6, 6] + [7] * 7 + [8] * 4 + [10] + [11] * 7 +
      [-1] * 4)
  np.testing.assert_array_equal(
      f["long_paragraph_ids"], [-1] * 5 + [5] * 13 + [9] * 8 + [-1] * 4)
  np.testing.assert_array_equal(
      f["long_paragraph_breakpoints"],
      [1, 0, 0, 0, 1] + [0] * 12 + [1] + [0] * 7 + [1] + [0] * 4)
  # Byte offsets into "John Doe was born in Paris." (tokens 7..13).
  np.testing.assert_array_equal(f["long_token_start"][7:14],
                                [0, 5, 9, 13, 18, 21, 26])
  np.testing.assert_array_equal(f["long_token_end"][7:14],
                                [4, 8, 12, 17, 20, 26, 27])
  assert f["long_token_start"][:5].tolist() == [-1] * 5
  # Labels: both paragraphs support (paragraph + title tokens), sentences
  # 0.0 and 1.0; the answer's first occurrence is "Paris" in sentence 0.0.
  np.testing.assert_array_equal(
      f["supporting_facts"], [0] * 5 + [1, 1, 1, 0, 1, 1, 1, 0, 0])
  assert int(f["answer_type"]) == data.SPAN
  assert (int(f["answer_start"]), int(f["answer_end"])) == (12, 12)
  bio = np.full([30], F.BIO_OUTSIDE)
  bio[[12, 18, 19]] = F.BIO_BEGIN  # sentence 0.0, title 1, sentence 1.0
  np.testing.assert_array_equal(f["answer_bio_ids"], bio)
  assert f["example_id"] == b"q1"


def test_offsets_recover_the_original_substring(vocab):
  # The sizes of the next tests: one trace of the featurizer for them all
  # (the records here fit either way).
  featurizer = _featurizer(vocab, 40, 16)
  sentence = "The  Japanese CAFÉ is big."
  record = _record(titles=("Café",), sentences=((sentence,),),
                   answer="CAFÉ", supporting_facts=(("Café", 0),))
  f, _, _ = featurizer.featurize_record(record)
  start, end = int(f["answer_start"]), int(f["answer_end"])
  # The title "Café" holds no exact "CAFÉ": the occurrence is in the sentence.
  assert int(f["long_sentence_ids"][start]) == 7
  text = sentence.encode()[f["long_token_start"][start]:
                           f["long_token_end"][end]].decode()
  assert text == "CAFÉ"
  # An answer inside a longer word gets the whole wordpiece.
  record = _record(titles=("T",), sentences=((sentence,),), answer="Japan",
                   supporting_facts=(("T", 0),))
  f, _, _ = featurizer.featurize_record(record)
  start, end = int(f["answer_start"]), int(f["answer_end"])
  assert sentence.encode()[f["long_token_start"][start]:
                           f["long_token_end"][end]].decode() == "Japanese"


def test_answer_in_title_and_first_supporting_occurrence(vocab):
  featurizer = _featurizer(vocab, 40, 16)
  # "Paris" first appears in a non-supporting sentence (Bob...): skipped.
  record = _record(
      sentences=(("Bob is Paris.", "John Doe was born in Paris."),
                 ("Paris is big.",)),
      supporting_facts=(("John Doe", 1),))
  f, _, _ = featurizer.featurize_record(record)
  start = int(f["answer_start"])
  assert f["global_sentence_ids"][f["long_sentence_ids"][start]] == 1
  # Answer only in a supporting paragraph's title.
  record = _record(answer="Doe", sentences=(("Bob is x.",), ("a b.",)),
                   supporting_facts=(("John Doe", 0),))
  f, _, _ = featurizer.featurize_record(record)
  start = int(f["answer_start"])
  assert f["global_kinds"][f["long_sentence_ids"][start]] == F.KIND_TITLE
  # yes / no: type, and span at CLS.
  f, _, reason = featurizer.featurize_record(_record(answer="no"),
                                             is_training=True)
  assert reason is None
  assert (int(f["answer_type"]), int(f["answer_start"]),
          int(f["answer_end"])) == (data.NO, 0, 0)


def test_training_skip_reasons_and_dev_kept(vocab):
  featurizer = _featurizer(vocab, 40, 16)
  cases = {
      data.NO_SUPPORTING_FACTS: _record(supporting_facts=(("Nope", 0),)),
      data.ANSWER_NOT_FOUND: _record(answer="Rome"),
  }
  for expected, record in cases.items():
    _, _, reason = featurizer.featurize_record(record, is_training=True)
    assert reason == expected
    f, _, reason = featurizer.featurize_record(record, is_training=False)
    assert reason is None and int(f["answer_start"]) == -1
  # The answer's only supporting sentence is cut by truncation.
  short = _featurizer(vocab, 16, 16)
  record = _record(sentences=(("a b c d e f a b c d e f a b Paris.",),
                              ("Bob is x.",)),
                   supporting_facts=(("John Doe", 0),))
  _, stats, reason = short.featurize_record(record, is_training=True)
  assert reason == data.ANSWER_TRUNCATED
  assert stats["sentences_dropped"] == 1
  # Unlabelled (test-set) records get no labels.
  f, _, reason = featurizer.featurize_record(
      _record(answer=None, supporting_facts=None), is_training=True)
  assert reason is None and int(f["answer_type"]) == -1
  assert not f["supporting_facts"].any()
  assert (f["answer_bio_ids"] == -1).all()


def test_greedy_truncation_skips_then_keeps_a_shorter_sentence(vocab):
  # Budgets: long 20 = CLS + 4 question + 15 context pieces; global 12.
  featurizer = _featurizer(vocab, 20, 12)
  record = _record(
      titles=("A", "B"),
      sentences=(("short.", "a b c d e f a b c d e f.", "short."),
                 ("long long.", "c.")),
      supporting_facts=(("A", 2),), answer="short")
  f, stats, reason = featurizer.featurize_record(record)
  assert reason is None
  kinds = f["global_kinds"].tolist()
  # Paragraph A: title, sentence 0, (sentence 1 skipped), sentence 2;
  # paragraph B: paragraph token, title, sentence 0 ("long long ."); then the
  # global budget is full and sentence B.1 ("c .", which would fit the long
  # budget) is dropped.
  assert kinds == [1, 2, 2, 2, 2, 3, 4, 5, 5, 3, 4, 5]
  assert f["global_sentence_ids"].tolist()[7:9] == [0, 2]
  assert stats == {"question_tokens_dropped": 0, "paragraphs_dropped": 0,
                   "titles_dropped": 0, "sentences_dropped": 2,
                   "context_tokens_dropped": 15}
  assert (f["token_ids"] != 0).sum() == 14
  # The answer's first occurrence in a supporting text: sentence A.2.
  g = f["long_sentence_ids"][int(f["answer_start"])]
  assert f["global_sentence_ids"][g] == 2


def test_long_question_is_cut_and_global_overflow_drops_paragraphs(vocab):
  featurizer = _featurizer(vocab, 8, 6)
  record = _record(question="who is x who is x who is x ?")
  f, stats, _ = featurizer.featurize_record(record)
  assert stats["question_tokens_dropped"] == 10 - 5
  assert f["global_kinds"].tolist() == [1, 2, 2, 2, 2, 2]
  assert stats["paragraphs_dropped"] == 2
  assert (f["long_token_start"] == -1).all()


def test_side_inputs_exempt_cls_from_hard_g2l(vocab):
  featurizer = _featurizer(vocab, 30, 14)
  f = featurizer.featurize(*F.record_inputs(_record())[:4])
  config = EtcConfig(vocab_size=60, local_radius=4,
                     relative_pos_max_distance=2, relative_vocab_size=8,
                     use_hard_g2l_mask=True)
  side = side_input_sources.from_features(
      config, {k: v[None] for k, v in f.items()}, "multihop")
  g2l = side["g2l_att_mask"][0].numpy()
  assert g2l[0, :26].all() and not g2l[0, 26:].any()  # CLS sees everything
  assert g2l[5, 5:18].all() and not g2l[5, 18:].any()  # paragraph 0 token
  assert g2l[7, 7:14].all() and g2l[7, :7].sum() == 0  # sentence 0.0 token


def test_in_graph_featurizer_matches_eager_and_batches(vocab):
  featurizer = _featurizer(vocab, 30, 14)
  record = _record()
  eager, _, _ = featurizer.featurize_record(record)

  @tf.function
  def traced(*args):
    return featurizer.featurize(*args)

  graph = traced(*F.record_inputs(record))
  for name in F.MODEL_FEATURES:
    np.testing.assert_array_equal(graph[name].numpy(), eager[name], name)


def test_sentencepiece_featurizer(tmp_path):
  texts = ["John Doe was born in Paris.", "Paris is the city of light.",
           "Who is John Doe?", "Bob is big."] * 20
  model = train_sentencepiece(tmp_path / "sp.model", texts, vocab_size=60)
  featurizer = F.HotpotFeaturizer(spm_model_path=model, long_seq_len=64,
                                  global_seq_len=14)
  assert featurizer.global_token_ids == F.GlobalTokenIds(
      cls=40, sentence=1, question=41, paragraph=43)
  f, _, reason = featurizer.featurize_record(_record(), is_training=True)
  assert reason is None
  assert f["global_token_ids"][0] == 40 and f["token_ids"][0] == 40
  start, end = int(f["answer_start"]), int(f["answer_end"])
  g = f["long_sentence_ids"][start]
  text = _record().sentences[0][f["global_sentence_ids"][g]]
  piece = text.encode()[f["long_token_start"][start]:
                        f["long_token_end"][end]].decode()
  assert piece.strip() == "Paris"
