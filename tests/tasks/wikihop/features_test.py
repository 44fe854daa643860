"""Tests for tasks.wikihop.features: segments, linking, truncation, in-graph."""

import heapq
import json
import random

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.data import tfrecords
from tasks.wikihop import data
from tasks.wikihop import features as F
from tasks.wikihop import preprocess
from tokenization_testing import train_sentencepiece
from tokenization_testing import write_test_vocab

WORDS = ["a", "b", "x", "y", "is", "in", "country", "of", "new", "york",
         "big"] + [f"s{i}" for i in range(40)]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return write_test_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt",
                          WORDS)


def _ids(vocab_path, text):
  with open(vocab_path) as f:
    v = [line.rstrip("\n") for line in f]
  return [v.index(w) for w in text.split()]


def test_hand_checked_tiny_record(vocab):
  featurizer = F.WikiHopFeaturizer(vocab, long_seq_len=26, global_seq_len=13)
  f = featurizer.featurize(
      tf.constant("country_of x"),
      tf.constant(["A ", "New York"]),
      *F.split_supports(
          tf.constant(["x is in new york. y is in a.", "A is big."])),
      answer=tf.constant(" NEW YORK"),
      example_id=tf.constant("WH_1"))
  f = {k: v.numpy() for k, v in f.items()}
  # Global: 2 candidates, 4 query wordpieces (country _ of x), doc0 =
  # paragraph + 2 sentences, doc1 = paragraph + 1 sentence, padding.
  np.testing.assert_array_equal(
      f["global_token_ids"], [4, 4, 3, 3, 3, 3, 5, 1, 1, 5, 1, 0, 0])
  np.testing.assert_array_equal(
      f["global_segment_ids"], [6, 6, 5, 5, 5, 5, 7, 0, 0, 7, 0, 0, 0])
  np.testing.assert_array_equal(
      f["global_paragraph_breakpoints"],
      [1, 1, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0])
  np.testing.assert_array_equal(
      f["ignore_hard_g2l_mask"], [1] * 6 + [0] * 7)
  np.testing.assert_array_equal(f["candidate_mask"], [1, 1] + [0] * 11)
  # Long: candidates, query, doc0 sentence 0, sentence 1, doc1, padding.
  expected_tokens = _ids(
      vocab, "a new york country _ of x x is in new york . y is in a . "
      "a is big .") + [0] * 4
  np.testing.assert_array_equal(f["token_ids"], expected_tokens)
  np.testing.assert_array_equal(
      f["segment_ids"], [4, 4, 4, 3, 3, 3, 3] + [1] * 15 + [0] * 4)
  np.testing.assert_array_equal(
      f["long_sentence_ids"],
      [0, 1, 1, 2, 3, 4, 5] + [7] * 6 + [8] * 5 + [10] * 4 + [-1] * 4)
  np.testing.assert_array_equal(
      f["long_paragraph_ids"], [-1] * 7 + [6] * 11 + [9] * 4 + [-1] * 4)
  np.testing.assert_array_equal(
      f["long_paragraph_breakpoints"],
      [1, 0, 1, 0, 0, 0, 1] + [0] * 10 + [1] + [0, 0, 0, 1] + [0] * 4)
  # Mentions: own wordpieces, "new york" in doc0, "a" in doc0 s1 and doc1.
  np.testing.assert_array_equal(
      f["l2g_linked_ids"],
      [0, 1, 1, -1, -1, -1, -1,
       -1, -1, -1, 1, 1, -1,
       -1, -1, -1, 0, -1,
       0, -1, -1, -1] + [-1] * 4)
  assert f["label"] == 1 and f["num_candidates"] == 2
  assert f["example_id"] == b"WH_1"
  assert f["candidates"].tolist() == [b"a", b"new york"]


def test_mentions_stay_within_a_sentence_and_later_candidate_wins(vocab):
  featurizer = F.WikiHopFeaturizer(vocab, long_seq_len=20, global_seq_len=10)
  f = featurizer.featurize("x", ["new york", "york", "big new"],
                           *F.split_supports(["a big new. york new york."]))
  linked = f["l2g_linked_ids"].numpy()
  # long: new york | york | big new | x | a big new . | york new york .
  doc = linked[6:15]
  # "big new" (cand 2) in s0; "new . york" is NOT "new york" (two
  # sentences); in s1 "york" alone (cand 1), then "new york" overlapped by
  # "york" (cand 1 beats cand 0 on the shared token).
  np.testing.assert_array_equal(doc, [-1, 2, 2, -1, 1, 0, 1, -1, -1])


def _original_heap_truncation(doc_sentence_lens, max_num_sentences,
                              max_num_tokens):
  """The original's max-heap algorithm, re-implemented for reference."""
  counts = [len(d) for d in doc_sentence_lens]
  total_s = sum(counts)
  total_t = sum(sum(d) for d in doc_sentence_lens)
  s_cut, t_cut = total_s - max_num_sentences, total_t - max_num_tokens
  heap, counter = [], 0
  for i, n in enumerate(counts):
    heapq.heappush(heap, (-n, counter, i))
    counter += 1
  if s_cut > 0 or t_cut > 0:
    while s_cut > 0 or t_cut > 0:
      n, _, i = heapq.heappop(heap)
      n = -n
      if n > 0:
        t_cut -= doc_sentence_lens[i][n - 1]
        s_cut -= 1
        n -= 1
      heapq.heappush(heap, (-n, counter, i))
      counter += 1
    for n, _, i in heap:
      counts[i] = -n
  return counts


def _kept_counts(f):
  """Kept sentences per doc, read back from the global tokens (a paragraph
  token, then one sentence token per kept sentence)."""
  counts = []
  for token in f["global_token_ids"].numpy():
    if token == 5:
      counts.append(0)
    elif token == 1:
      counts[-1] += 1
  return counts


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_truncation_order_matches_original_heap(vocab, seed):
  rng = random.Random(seed)
  num_docs = rng.randint(2, 5)
  lens = [[rng.randint(2, 5) for _ in range(rng.randint(1, 6))]
          for _ in range(num_docs)]
  word = iter(range(40))
  docs = []
  for d in lens:
    # Sentence of n wordpieces: n - 1 times a unique word, then ".".
    docs.append(" ".join(" ".join([f"s{next(word)}"] * (n - 1)) + "."
                         for n in d))
  total_tokens = sum(map(sum, lens))
  max_sents = rng.randint(1, sum(map(len, lens)))
  budget = rng.randint(total_tokens // 3, total_tokens)
  # Candidate "a" (1 wordpiece) + query "x" (1): long budget = L - 2.
  featurizer = F.WikiHopFeaturizer(vocab, long_seq_len=budget + 2,
                                   global_seq_len=200,
                                   max_num_sentences=max_sents)
  f, stats = featurizer.featurize_with_stats("x", ["a"],
                                             *F.split_supports(docs))
  expected = _original_heap_truncation(lens, max_sents, budget)
  # Documents left with no sentence keep their paragraph token.
  assert _kept_counts(f) == expected
  assert int(stats["sentences_dropped"]) == sum(map(len, lens)) - sum(
      expected)
  assert int(stats["docs_emptied"]) == expected.count(0)
  assert int(stats["doc_tokens_dropped"]) == total_tokens - sum(
      sum(d[:c]) for d, c in zip(lens, expected))


def test_truncation_counts_paragraph_tokens_in_global_budget(vocab):
  featurizer = F.WikiHopFeaturizer(vocab, long_seq_len=100, global_seq_len=8)
  # 2 candidates + 1 query token leave 5 global tokens: 2 paragraph tokens
  # + 6 sentences must lose 3 sentences (s4, s3, then s6: position 1 of the
  # doc with fewer sentences goes before position 1 of the longer one).
  f, stats = featurizer.featurize_with_stats(
      "x", ["a", "b"], *F.split_supports(["s1. s2. s3. s4.", "s5. s6."]))
  assert f["global_token_ids"].numpy().tolist() == [4, 4, 3, 5, 1, 1, 5, 1]
  assert int(stats["sentences_dropped"]) == 3
  # A document emptied by truncation keeps its paragraph token (with the
  # breakpoint), as the original: 2 paragraphs + 1 sentence fit.
  featurizer = F.WikiHopFeaturizer(vocab, long_seq_len=100, global_seq_len=6)
  f, stats = featurizer.featurize_with_stats(
      "x", ["a", "b"], *F.split_supports(["s1. s2.", "s5."]))
  assert f["global_token_ids"].numpy().tolist() == [4, 4, 3, 5, 1, 5]
  assert f["global_paragraph_breakpoints"].numpy().tolist() == [
      1, 1, 1, 0, 1, 1]
  assert int(stats["docs_emptied"]) == 1
  assert int(stats["sentences_dropped"]) == 2


def test_query_truncated_only_when_candidates_leave_no_room(vocab):
  featurizer = F.WikiHopFeaturizer(vocab, long_seq_len=6, global_seq_len=30)
  f, stats = featurizer.featurize_with_stats("x y x y", ["new york", "a"],
                                             *F.split_supports(["a is big."]))
  assert int(stats["query_tokens_dropped"]) == 1
  assert int(stats["sentences_dropped"]) == 1
  assert int(stats["overflow"]) == 0
  np.testing.assert_array_equal(f["segment_ids"], [4, 4, 4, 3, 3, 3])
  f, stats = featurizer.featurize_with_stats(
      "x", ["new york", "a", "b", "x", "y", "big"], *F.split_supports(["a."]))
  assert int(stats["overflow"]) == 1


def test_global_token_ids_are_configurable(vocab):
  ids = F.GlobalTokenIds(sentence=7, question=8, candidate=9, paragraph=10)
  featurizer = F.WikiHopFeaturizer(vocab, long_seq_len=20, global_seq_len=8,
                                   global_token_ids=ids)
  f = featurizer.featurize("x", ["a"], *F.split_supports(["a."]))
  assert f["global_token_ids"].numpy().tolist() == [9, 8, 10, 7, 0, 0, 0, 0]
  # The default for a WordPiece vocabulary: [unused0], [unused2..4].
  default = F.WikiHopFeaturizer(vocab, long_seq_len=20, global_seq_len=8)
  assert default.global_token_ids == F.GlobalTokenIds(
      sentence=1, question=3, candidate=4, paragraph=5)


def _records():
  return [
      dict(id="r0", query="country_of x", candidates=["a", "New York"],
           answer="new york",
           supports=["x is in new york. y is in a.", "A is big."]),
      dict(id="r1", query="of y", candidates=["b", "a", "x"], answer="x",
           supports=["y is b. a. a. a.", "b is a. b.", "x x x."]),
      dict(id="r2", query="big", candidates=["york", "new"], answer="york",
           supports=["s1 s2 s3. s4 s5.", "new york new york."]),
  ]


def test_in_graph_serving_path_equals_preprocessed_tfrecords(vocab, tmp_path):
  path = tmp_path / "dev.json"
  path.write_text(json.dumps(_records()))
  featurizer = preprocess.make_featurizer(vocab, None, 24, 12)
  stats = preprocess.preprocess_file(str(path), str(tmp_path / "out"),
                                     featurizer)
  assert stats.examples_written == 3
  cached = list(tfrecords.make_dataset(
      str(tmp_path / "out" / "dev.tfrecord"),
      F.feature_spec(24, 12)).as_numpy_iterator())

  @tf.function(input_signature=[
      tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.string),
      tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int32),
      tf.TensorSpec([], tf.string)])
  def serve(query, candidates, sentences, num_sentences, answer):
    return featurizer.featurize(query, candidates, sentences,
                                             num_sentences, answer)

  split = [F.split_supports(r["supports"]) for r in _records()]
  batch = featurizer.featurize_batch(
      tf.constant([r["query"] for r in _records()]),
      tf.ragged.constant([r["candidates"] for r in _records()]),
      tf.ragged.constant([s for s, _ in split], tf.string),
      tf.ragged.constant([n for _, n in split], tf.int32))
  for i, (record, want) in enumerate(zip(_records(), cached)):
    got = serve(record["query"], record["candidates"], *split[i],
                record["answer"])
    for name in F.MODEL_FEATURES + ("label", "num_candidates"):
      np.testing.assert_array_equal(got[name].numpy(), want[name], name)
      if name != "label":
        np.testing.assert_array_equal(batch[name][i].numpy(), want[name],
                                      name)
    assert batch["label"][i] == -1
    assert batch["candidates"][i].numpy().tolist() == want[
        "candidates"].tolist()


def test_featurizer_saved_model_signature(vocab, tmp_path):
  featurizer = F.WikiHopFeaturizer(vocab, long_seq_len=24, global_seq_len=12)
  module = tf.Module()
  module.featurizer = featurizer
  module.featurize = tf.function(
      lambda q, c, s, n: {
          k: v for k, v in featurizer.featurize(
              q, c, s, n).items() if k in F.MODEL_FEATURES},
      input_signature=[tf.TensorSpec([], tf.string),
                       tf.TensorSpec([None], tf.string),
                       tf.TensorSpec([None], tf.string),
                       tf.TensorSpec([None], tf.int32)])
  export = str(tmp_path / "saved")
  tf.saved_model.save(module, export,
                      signatures={"featurize": module.featurize})
  loaded = tf.saved_model.load(export)
  record = _records()[1]
  sentences, num_sentences = F.split_supports(record["supports"])
  got = loaded.signatures["featurize"](
      q=tf.constant(record["query"]), c=tf.constant(record["candidates"]),
      s=tf.constant(sentences), n=tf.constant(num_sentences))
  want = featurizer.featurize(record["query"], record["candidates"],
                              *F.split_supports(record["supports"]))
  for name in F.MODEL_FEATURES:
    np.testing.assert_array_equal(got[name].numpy(), want[name].numpy())


def test_sentencepiece_path(tmp_path):
  texts = ["x is in new york.", "new york is big.", "the country of x."] * 50
  texts += [f"word{i} lies in place{i}." for i in range(100)]
  model = train_sentencepiece(tmp_path / "sp.model", texts, vocab_size=100)
  featurizer = F.WikiHopFeaturizer(spm_model_path=model, long_seq_len=80,
                                   global_seq_len=40)
  assert featurizer.global_token_ids == F.GlobalTokenIds(
      sentence=1, question=41, candidate=42, paragraph=43)
  record = data.validate_record(
      dict(id="sp", query="country_of X", candidates=["New York", "x"],
           answer="x", supports=["X is in new york. New York is big."]),
      "f.json", 0)
  f, stats = featurizer.featurize_record(record)
  tok = featurizer.tokenizer
  cand0 = tok.tokenize_py("new york")
  n0 = len(cand0)
  np.testing.assert_array_equal(f["token_ids"][:n0], cand0)
  assert f["global_token_ids"].tolist()[:2] == [42, 42]
  assert 41 in f["global_token_ids"] and 43 in f["global_token_ids"]
  # The candidate is lower-cased, the support is not (a SentencePiece
  # vocabulary is not lower-cased, as the original's): only the lower-case
  # mention is the candidate's pieces.
  doc_start = n0 + len(tok.tokenize_py("x")) + len(
      tok.tokenize_py("country_of X"))
  linked = f["l2g_linked_ids"][doc_start:]
  assert np.sum(linked == 0) == n0
  assert f["label"] == 1 and stats["overflow"] == 0
  assert stats["sentences_dropped"] == 0


def test_mark_query_subject_types_exact_subject_mentions_in_documents(vocab):
  record = (tf.constant("country_of new york"), tf.constant(["A", "B"]),
            *F.split_supports(["New York is in a. York is big.",
                               "new york new"]))
  plain = F.WikiHopFeaturizer(vocab, long_seq_len=30, global_seq_len=14)
  marked = F.WikiHopFeaturizer(vocab, long_seq_len=30, global_seq_len=14,
                               mark_query_subject=True)
  before = plain.featurize(*record)
  after = marked.featurize(*record)
  for name in before:  # only the segment ids change
    if name != "segment_ids":
      np.testing.assert_array_equal(before[name].numpy(), after[name].numpy())
  tokens = before["token_ids"].numpy()
  seg = after["segment_ids"].numpy()
  # Long: a b | country _ of new york | new york is in a . york is big .
  # | new york new | padding. Only the two full "new york" matches inside
  # the documents are typed 2; the query keeps 3, a lone "york" stays 1.
  expected = before["segment_ids"].numpy().copy()
  doc0 = 2 + 5
  expected[[doc0, doc0 + 1]] = F.QUERY_SUBJECT_TOKEN_TYPE_ID
  doc1 = doc0 + 10
  expected[[doc1, doc1 + 1]] = F.QUERY_SUBJECT_TOKEN_TYPE_ID
  np.testing.assert_array_equal(seg, expected)
  np.testing.assert_array_equal(tokens[[doc0, doc0 + 1]],
                                _ids(vocab, "new york"))
  assert (before["segment_ids"].numpy() != 2).all()


def test_mark_query_subject_without_subject_marks_nothing(vocab):
  featurizer = F.WikiHopFeaturizer(vocab, long_seq_len=20, global_seq_len=10,
                                   mark_query_subject=True)
  f = featurizer.featurize(
      tf.constant("country_of"), tf.constant(["a"]),
      *F.split_supports(tf.constant(["country of a."])))
  assert (f["segment_ids"].numpy() != F.QUERY_SUBJECT_TOKEN_TYPE_ID).all()


def test_mentions_need_the_candidate_in_the_sentence_text(vocab):
  # As the original: a candidate is linked in a sentence only when its
  # lower-cased text contains the lower-cased candidate. "new\u00a0york"
  # tokenizes as "new york" but does not contain it.
  featurizer = F.WikiHopFeaturizer(vocab, long_seq_len=20, global_seq_len=10)
  f = featurizer.featurize(
      "x", ["new york", "york"],
      *F.split_supports(["a new\u00a0york. big New York."]))
  linked = f["l2g_linked_ids"].numpy()
  # long: new york | york | x | a new york . | big new york . ("york",
  # the later candidate, wins the shared token)
  np.testing.assert_array_equal(linked[4:13],
                                [-1, -1, 1, -1, -1, 0, 1, -1, -1])


def test_empty_support_keeps_its_paragraph_token(vocab):
  featurizer = F.WikiHopFeaturizer(vocab, long_seq_len=20, global_seq_len=10)
  f, stats = featurizer.featurize_with_stats(
      "x", ["a"], *F.split_supports(["", "a is big."]))
  # Global: candidate, query, [paragraph] of the empty support (its own
  # breakpoint), [paragraph, sentence] of the second.
  assert f["global_token_ids"].numpy().tolist() == [4, 3, 5, 5, 1, 0, 0, 0,
                                                     0, 0]
  assert f["global_paragraph_breakpoints"].numpy().tolist() == [
      1, 1, 1, 0, 1, 0, 0, 0, 0, 0]
  np.testing.assert_array_equal(f["long_paragraph_ids"].numpy()[2:6],
                                [3, 3, 3, 3])
  np.testing.assert_array_equal(f["long_sentence_ids"].numpy()[2:6],
                                [4, 4, 4, 4])
  assert int(stats["docs_emptied"]) == 0


def test_split_supports_is_punkt(vocab):
  del vocab
  sentences, counts = F.split_supports(
      ["The St. Louis Cardinals won ( 3 - 1 ) . Martin Luther King Jr. "
       "spoke .", b"", tf.constant("One. Two.").numpy()])
  assert sentences == ["The St. Louis Cardinals won ( 3 - 1 ) .",
                       "Martin Luther King Jr. spoke .", "One.", "Two."]
  assert counts == [2, 0, 2]


def test_candidate_with_regex_characters_is_matched_literally(vocab):
  featurizer = F.WikiHopFeaturizer(vocab, long_seq_len=30, global_seq_len=10)
  f = featurizer.featurize("x", ["a.", "a\\Eb", "(a)"],
                           *F.split_supports(["a. b a\\Eb (a)."]))
  cand_in = F._contains(tf.constant(["a. b a\\Eb (a).", "xa"]),
                        tf.constant(["a.", "a\\Eb", "(a)", "a*", ""]))
  np.testing.assert_array_equal(cand_in.numpy(), [[True, False],
                                                  [True, False],
                                                  [True, False],
                                                  [False, False],
                                                  [False, False]])
  assert (f["l2g_linked_ids"].numpy() >= 0).sum() > 0


def test_split_supports_inside_a_graph_says_what_to_do(vocab):
  del vocab

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def split(supports):
    return F.split_supports(supports)

  with pytest.raises(TypeError, match="featurize"):
    split(tf.constant(["a."]))
