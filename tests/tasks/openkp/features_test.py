"""Tests for tasks.openkp.features: hand-checked segments, truncation, labels,
the in-graph VDOM parser, serving = preprocessing, SentencePiece."""

import json

import numpy as np
import pytest
import tensorflow as tf

from openkp_testing import make_record
from openkp_testing import vdom_features
from tasks.openkp import data
from tasks.openkp import features as F
from tokenization_testing import train_sentencepiece
from tokenization_testing import write_test_vocab


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  # "kp1" is one piece, "unknownword" -> [UNK], "cafe" for "Café".
  return write_test_vocab(tmp_path_factory.mktemp("v") / "vocab.txt",
                          ["kp1", "kp2", "a", "b", "c", "cafe", "##s"])


def _record(elements, keyphrases=None, features=None):
  rec = make_record("http://x", elements, keyphrases, features)
  return data.validate_record(rec, "f", 0, labeled=keyphrases is not None)[0]


def test_segments_by_hand(vocab):
  # Words: 0 "kp1" 1 "b," 2 "" (double space) 3 "Cafés" | 4 "c" 5 "kp2".
  feats = [vdom_features(x=float(i), heading=float(i == 0)) for i in range(3)]
  record = _record([["kp1", "b,", "", "Cafés"], [], ["c", "kp2"]],
                   [["Cafés"], ["C", "kp2"]], feats)
  featurizer = F.OpenKPFeaturizer(vocab_path=vocab, long_seq_len=12,
                                  global_seq_len=4)
  f, stats = featurizer.featurize_record(record)
  tok = featurizer.tokenizer
  ids = [tok.token_id(t) for t in ("kp1", "b", ",", "cafe", "##s", "c",
                                   "kp2")]
  assert f["token_ids"].tolist() == ids + [0] * 5
  assert f["long_word_ids"].tolist() == [0, 1, 1, 3, 3, 4, 5] + [0] * 5
  # The empty element 1 owns no word; words 4-5 belong to element 2.
  assert f["long_sentence_ids"].tolist() == [0, 0, 0, 0, 0, 2, 2] + [0] * 5
  assert f["long_input_mask"].tolist() == [1] * 7 + [0] * 5
  assert f["word_mask"].tolist() == [1] * 6 + [0] * 6
  assert f["num_words"] == 6
  assert [w.decode() for w in f["words"]] == ["kp1", "b,", "", "Cafés", "c",
                                              "kp2"]
  # Padding is id 1 too, as the original (the mask tells it).
  assert f["global_token_ids"].tolist() == [1, 1, 1, 1]
  assert f["global_input_mask"].tolist() == [1, 1, 1, 0]
  np.testing.assert_allclose(f["global_vdom_features"][:3], feats)
  assert not f["global_vdom_features"][3].any()
  # The original's order, by element: "cafés" (element 0) at word 3, then
  # "c kp2" (element 2) at word 4 (2 words).
  assert f["label_start"].tolist() == [3, 4, -1]
  assert f["label_length"].tolist() == [1, 2, -1]
  assert list(f["keyphrases"]) == ["c kp2", "cafés"]
  assert f["url"] == "http://x"
  assert stats == dict(words_dropped=0, wordpieces_dropped=0,
                       elements_dropped=0, keyphrases_truncated=0,
                       keyphrases_across_elements=0)


def test_truncation_keeps_a_word_prefix_and_drops_cut_labels(vocab):
  record = _record([["a", "b"], ["Cafés", "c"], ["kp1", "kp2"]],
                   [["kp1"], ["a", "b"]])
  # 3 wordpieces: "a", "b" fit, "Cafés" (cafe ##s) would not: it is cut.
  featurizer = F.OpenKPFeaturizer(vocab_path=vocab, long_seq_len=3,
                                  global_seq_len=8)
  f, stats = featurizer.featurize_record(record)
  assert f["num_words"] == 2 and f["word_mask"].tolist() == [1, 1, 0]
  assert f["global_input_mask"].tolist() == [1] + [0] * 7
  assert f["label_start"].tolist() == [0, -1, -1]  # "a b"; "kp1" cut
  assert stats == dict(words_dropped=4, wordpieces_dropped=5,
                       elements_dropped=2, keyphrases_truncated=1,
                       keyphrases_across_elements=0)
  # The global length limits elements (and so words) too.
  featurizer = F.OpenKPFeaturizer(vocab_path=vocab, long_seq_len=64,
                                  global_seq_len=2)
  f, stats = featurizer.featurize_record(record)
  assert f["num_words"] == 4 and f["global_input_mask"].tolist() == [1, 1]
  assert stats["elements_dropped"] == 1 and stats["words_dropped"] == 2


def test_phrase_only_across_elements_gets_no_label(vocab):
  record = _record([["a", "kp1"], ["kp2", "b"]], [["kp1", "kp2"], ["b"]])
  featurizer = F.OpenKPFeaturizer(vocab_path=vocab, long_seq_len=8,
                                  global_seq_len=2)
  f, stats = featurizer.featurize_record(record)
  assert f["label_start"].tolist() == [3, -1, -1]  # "b" only
  assert list(f["keyphrases"]) == ["b", "kp1 kp2"]  # both still scored
  assert stats["keyphrases_across_elements"] == 1


def test_labels_skip_phrases_longer_than_five_words():
  starts, lengths, lost = F.make_labels([(0, 6), (2, 5), (9, 1)], 10)
  assert starts.tolist() == [2, 9, -1] and lengths.tolist() == [5, 1, -1]
  assert lost == 1


def test_vdom_regex_parser_matches_json():
  # Texts that mention the key names, quotes, brackets, non-ASCII; numbers
  # in every JSON form.
  feats = [vdom_features(x=-1.5e-3, y=2e3, font=12.5),
           [0, 1, 2, 3, 1, 0, 0, 1, 16, 0, 1e2, 2E-1, -0, 3.25, 1, 0, 1, 0,
            9, 1]]
  vdom = json.dumps([
      {"Id": 3, "text": 'say "start_idx": 99, "feature": [1] }{ ] Zürich',
       "feature": feats[0], "start_idx": 0, "end_idx": 7},
      {"end_idx": 9, "text": "\\\"end_idx\\\": 5", "start_idx": 7,
       "feature": feats[1], "Id": 3}])
  starts, ends, values = F.parse_vdom_tf(tf.constant(vdom))
  assert starts.numpy().tolist() == [0, 7]
  assert ends.numpy().tolist() == [7, 9]
  np.testing.assert_allclose(values.numpy(), np.array(feats, np.float32))
  with pytest.raises(tf.errors.InvalidArgumentError, match="20 numbers"):
    F.parse_vdom_tf(tf.constant('[{"start_idx": 0, "end_idx": 1, '
                                '"feature": [1, 2]}]'))


def test_serving_from_raw_strings_equals_preprocessing(vocab):
  record = _record([["kp1", "Cafés"], ["a", "", "b"], ["c"]], [["kp1"]],
                   [vdom_features(y=float(i)) for i in range(3)])
  featurizer = F.OpenKPFeaturizer(vocab_path=vocab, long_seq_len=16,
                                  global_seq_len=4)
  expected, _ = featurizer.featurize_record(record)
  raw = tf.function(featurizer.featurize)(
      tf.constant(record.text), tf.constant(record.vdom_json()))
  for name in F.MODEL_FEATURES + ("num_words", "words"):
    np.testing.assert_array_equal(raw[name].numpy(), expected[name], name)


def test_sentencepiece_vocabulary(tmp_path):
  texts = ["machine learning is fun", "deep learning models", "kp one two"]
  model = train_sentencepiece(tmp_path / "sp.model", texts * 20,
                              vocab_size=40)
  featurizer = F.OpenKPFeaturizer(spm_model_path=model, long_seq_len=32,
                                  global_seq_len=4)
  record = _record([["Machine", "learning"], ["is", "fun"]],
                   [["machine", "learning"]])
  f, _ = featurizer.featurize_record(record)
  n = int(f["long_input_mask"].sum())
  assert n >= 4
  # Wordpieces of a word are contiguous and in word order.
  word_ids = f["long_word_ids"][:n].tolist()
  assert word_ids == sorted(word_ids) and set(word_ids) == {0, 1, 2, 3}
  assert f["label_start"].tolist() == [0, -1, -1]


def _vdom(features, starts=(0,), ends=(2,)):
  return json.dumps([{"Id": 0, "text": "", "feature": f, "start_idx": s,
                      "end_idx": e} for f, s, e in zip(features, starts, ends)])


NOT_FINITE = "a feature value that is not a finite JSON number"
NOT_VDOM = "not a VDOM JSON array"


@pytest.mark.parametrize("vdom,message", [
    # Python's json writes NaN and Infinity; a number past float32 is inf.
    (_vdom([vdom_features(y=float("nan"))]), NOT_FINITE),
    (_vdom([vdom_features(width=float("-inf"))]), NOT_FINITE),
    (_vdom([vdom_features()]).replace("300.0", "1e999"),
     "a feature number out of float32's range"),
    (_vdom([vdom_features()]).replace("300.0", '"300"'), NOT_FINITE),
    # Text that is not the VDOM JSON holds no element.
    ("a plain text", NOT_VDOM),
    ("[]", NOT_VDOM),
    ('{"start_idx": 0, "end_idx": 2, "feature": [' + "1," * 19 + "1]}",
     NOT_VDOM),
])
def test_bad_vdom_in_the_graph_fails_naming_the_input(vdom, message):
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=f"my_input: {message}"):
    F.parse_vdom_tf(tf.constant(vdom), "my_input")


def test_raw_vdom_must_cover_the_text_as_preprocessing_checks(vocab):
  featurizer = F.OpenKPFeaturizer(vocab_path=vocab, long_seq_len=8,
                                  global_seq_len=2)
  feats = [vdom_features()] * 2
  for starts, ends in (((0, 1), (1, 3)),   # ends at word 3 of 2
                       ((1, 1), (1, 2)),   # starts at word 1
                       ((0, 2), (1, 2))):  # a gap
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="in: the elements do not cover the words"):
      featurizer.featurize(tf.constant("a b"),
                                  tf.constant(_vdom(feats, starts, ends)),
                                  "in")
  good = featurizer.featurize(
      tf.constant("a b"), tf.constant(_vdom(feats, (0, 1), (1, 2))), "in")
  assert good["global_input_mask"].numpy().tolist() == [1, 1]
