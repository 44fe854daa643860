"""Tests for tasks.pretrain.masking: the MLM statistics over many examples
(rate, whole words, 80/10/10, nothing masked that must not be), the CPC
selection and its second-pass inputs, and the determinism of the draws."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.errors import UserInputError
from tasks.pretrain import features
from tasks.pretrain import masking
import pretrain_testing

MASK, SEP = 14, 13
VOCAB = 120


def _random_batch(rng, batch=64, long_len=128, global_len=16):
  """Stored features of random documents: 2-12 sentences of 2-20 pieces,
  words of 1-3 pieces, ids 20..119 (a few [SEP]s among them)."""
  f = {n: np.zeros([batch, long_len], np.int32)
       for n in features.FEATURES[:4]}
  f.update({n: np.zeros([batch, global_len], np.int32)
            for n in features.FEATURES[4:]})
  for b in range(batch):
    lengths = []
    while True:
      n = int(rng.randint(2, 21))
      if sum(lengths) + n > long_len or len(lengths) == global_len or (
          len(lengths) >= 2 and rng.rand() < 0.12):
        break
      lengths.append(n)
    total = sum(lengths)
    f["token_ids"][b, :total] = rng.randint(20, VOCAB, size=total)
    f["token_ids"][b, :total][rng.rand(total) < 0.02] = SEP
    f["sentence_ids"][b, :total] = np.repeat(np.arange(len(lengths)),
                                             lengths)
    starts = np.zeros(total, np.int32)
    pos = 0
    while pos < total:
      starts[pos] = 1
      pos += int(rng.randint(1, 4))
    f["word_starts"][b, :total] = starts
    f["long_breakpoints"][b, total - 1] = 1
    f["global_token_ids"][b, :len(lengths)] = 1
    f["global_breakpoints"][b, len(lengths) - 1] = 1
  return f


def _mask(f, config, seed=(1, 2)):
  out = masking.mask_batch({k: tf.constant(v) for k, v in f.items()},
                           config, tf.constant(seed, tf.int64))
  return {k: v.numpy() for k, v in out.items()}


def _words(f, b):
  """(start, end) of each word of example b (a new word at every word
  start and every sentence start)."""
  n = int(np.argmax(f["long_breakpoints"][b])) + 1
  sent = f["sentence_ids"][b, :n]
  starts = (f["word_starts"][b, :n] > 0) | np.r_[True, sent[1:] != sent[:-1]]
  idx = np.flatnonzero(starts)
  return list(zip(idx, np.r_[idx[1:], n]))


@pytest.fixture(scope="module")
def many():
  rng = np.random.RandomState(0)
  config = masking.MaskingConfig(
      vocab_size=VOCAB, mask_token_id=MASK, no_mask_token_ids=(0, SEP, MASK),
      max_predictions_per_seq=40, cpc_sentence_rate=0.2,
      max_cpc_sentences=3, cpc_max_sentence_len=12)
  batches = []
  for i in range(8):
    f = _random_batch(rng)
    batches.append((f, _mask(f, config, seed=(7, i))))
  return config, batches


def test_mlm_rate_whole_words_and_80_10_10(many):
  config, batches = many
  chosen = candidates = replaced = randomised = kept = 0
  for f, out in batches:
    for b in range(f["token_ids"].shape[0]):
      n = int(np.argmax(f["long_breakpoints"][b])) + 1
      weights = out["masked_lm_weights"][b] > 0
      positions = out["masked_lm_positions"][b][weights]
      cpc = out["token_ids"][b, :n] * 0 > 0
      for g, w in zip(out["cpc_global_positions"][b],
                      out["cpc_weights"][b]):
        if w:
          cpc |= f["sentence_ids"][b, :n] == g
      special = np.isin(f["token_ids"][b, :n], config.no_mask_token_ids)
      cand = ~cpc & ~special
      # Never padding, special tokens or CPC sentences' tokens.
      assert positions.max(initial=0) < n
      assert not special[positions].any() and not cpc[positions].any()
      assert len(set(positions.tolist())) == len(positions)
      np.testing.assert_array_equal(out["masked_lm_ids"][b][weights],
                                    f["token_ids"][b, positions])
      # Whole words: a word is all predicted or not at all.
      chosen_set = set(positions.tolist())
      for start, end in _words(f, b):
        inside = [p in chosen_set for p in range(start, end)]
        assert all(inside) or not any(inside), (b, start, end)
      # The budget: round(15% of the candidates), never above it.
      budget = min(int(np.floor(0.15 * cand.sum() + 0.5)),
                   config.max_predictions_per_seq)
      assert len(positions) <= max(budget, 1)
      chosen += len(positions)
      candidates += int(cand.sum())
      masked = out["token_ids"][b, positions]
      orig = f["token_ids"][b, positions]
      replaced += int(np.sum(masked == MASK))
      kept += int(np.sum(masked == orig))
      randomised += int(np.sum((masked != MASK) & (masked != orig)))
      # Outside the predictions and CPC sentences nothing changes.
      other = np.ones(n, bool)
      other[positions] = False
      other &= ~cpc
      np.testing.assert_array_equal(out["token_ids"][b, :n][other],
                                    f["token_ids"][b, :n][other])
      assert (out["token_ids"][b, n:] == 0).all()
  assert 0.135 < chosen / candidates <= 0.15, chosen / candidates
  # 80/10/10 over ~9,000 predictions (a random id equal to the original
  # counts as kept: 1/100 of the random tenth).
  assert replaced / chosen == pytest.approx(0.8, abs=0.02)
  assert randomised / chosen == pytest.approx(0.1 * 0.99, abs=0.015)
  assert kept / chosen == pytest.approx(0.1 + 0.001, abs=0.015)


def test_cpc_selection_and_second_pass_inputs(many):
  config, batches = many
  total_sentences = total_cpc = 0
  for f, out in batches:
    for b in range(f["token_ids"].shape[0]):
      lengths = features.sentence_lengths(
          {k: v[b] for k, v in f.items()})
      eligible = (lengths >= 2) & (lengths <= 12)
      w = out["cpc_weights"][b] > 0
      chosen = out["cpc_global_positions"][b][w]
      want = min(3, int(eligible.sum()), len(lengths) - 1,
                 max(1, int(np.floor(0.2 * len(lengths) + 0.5))))
      assert len(chosen) == want
      assert len(set(chosen.tolist())) == len(chosen)
      assert eligible[chosen].all()
      total_sentences += len(lengths)
      total_cpc += len(chosen)
      for slot in range(3):
        tokens = out["cpc_token_ids"][b, slot]
        length = out["cpc_lengths"][b, slot]
        if not w[slot]:
          assert length == 0 and (tokens == 0).all()
          continue
        g = out["cpc_global_positions"][b, slot]
        original = f["token_ids"][b][f["sentence_ids"][b] == g][
            :lengths[g]]
        assert length == lengths[g]
        np.testing.assert_array_equal(tokens[:length], original)
        assert (tokens[length:] == 0).all()
        # All the sentence's long tokens are [MASK]; its summary token
        # stays.
        n = int(np.argmax(f["long_breakpoints"][b])) + 1
        in_sentence = f["sentence_ids"][b, :n] == g
        assert (out["token_ids"][b, :n][in_sentence] == MASK).all()
        assert out["global_token_ids"][b, g] == 1
  assert 0.15 < total_cpc / total_sentences < 0.25


def test_cpc_negatives_are_length_matched_sentences_of_other_examples():
  rng = np.random.RandomState(3)
  f = _random_batch(rng, batch=16)
  args = dict(vocab_size=VOCAB, mask_token_id=MASK,
              no_mask_token_ids=(0, SEP, MASK), max_predictions_per_seq=40,
              cpc_sentence_rate=0.2, max_cpc_sentences=3,
              cpc_max_sentence_len=12)
  k = 4
  plain = _mask(f, masking.MaskingConfig(**args), seed=(7, 0))
  config = masking.MaskingConfig(cpc_negatives=k, **args)
  out = _mask(f, config, seed=(7, 0))
  # The negatives add to the batch; they change nothing else.
  for name in plain:
    np.testing.assert_array_equal(out[name], plain[name])
  spec = config.output_spec()
  for name in masking.NEGATIVE_OUTPUTS:
    assert list(out[name].shape[1:]) == spec[name].shape[1:].as_list()
  # Every unmasked sentence of 1-12 pieces: (example, length, ids).
  pool = []
  for b in range(16):
    lengths = features.sentence_lengths({n: v[b] for n, v in f.items()})
    cpc = set(out["cpc_global_positions"][b][out["cpc_weights"][b] > 0])
    for g, n in enumerate(lengths):
      if g not in cpc and 1 <= n <= 12:
        ids = f["token_ids"][b][f["sentence_ids"][b] == g][:n]
        pool.append((b, int(n), tuple(ids.tolist())))
  checked = 0
  for b in range(16):
    for c in range(3):
      slots = slice(c * k, (c + 1) * k)
      lengths = out["cpc_negative_lengths"][b, slots]
      ids = out["cpc_negative_token_ids"][b, slots]
      if not out["cpc_weights"][b, c]:
        assert (lengths == 0).all() and (ids == 0).all()
        continue
      query = out["cpc_lengths"][b, c]
      others = [p for p in pool if p[0] != b]
      # The k nearest distances of the pool, and sentences that exist in
      # another example with exactly their length and pieces.
      nearest = sorted(abs(n - query) for _, n, _ in others)[:k]
      assert sorted(np.abs(lengths - query).tolist()) == nearest
      for n, row in zip(lengths, ids):
        assert any(p[1] == n and p[2] == tuple(row[:n].tolist())
                   for p in others)
        assert (row[n:] == 0).all()
      checked += 1
  assert checked > 10


def test_hand_batch_and_determinism():
  f = pretrain_testing.hand_batch()
  config = masking.MaskingConfig(vocab_size=VOCAB, mask_token_id=MASK,
                                 no_mask_token_ids=(0, SEP),
                                 max_predictions_per_seq=6,
                                 cpc_sentence_rate=0.1, max_cpc_sentences=2,
                                 cpc_max_sentence_len=8)
  out = _mask(f, config)
  # Example 0: 4 sentences -> round(0.4) = 0 -> at least 1 CPC sentence;
  # example 1: 2 sentences -> 1.
  assert out["cpc_weights"].tolist() == [[1, 0], [1, 0]]
  # Example 1: a CPC sentence of 2 pieces leaves 7 candidates (budget
  # round(1.05) = 1: a one-piece word), of 7 leaves one 2-piece word, which
  # does not fit the budget of 1 (never exceeded, as BERT's).
  expected = 1 if out["cpc_lengths"][1, 0] == 2 else 0
  assert out["masked_lm_weights"][1].sum() == expected
  again = _mask(f, config)
  for key in out:
    np.testing.assert_array_equal(out[key], again[key])
  other = [_mask(f, config, seed=(1, s)) for s in range(3, 8)]
  assert any((o["token_ids"] != out["token_ids"]).any() for o in other)
  # Specs of the outputs as the task declares them.
  spec = config.output_spec()
  for name, s in spec.items():
    assert list(out[name].shape[1:]) == s.shape[1:].as_list(), name
    assert out[name].dtype == s.dtype.as_numpy_dtype


def test_no_cpc_and_bad_settings():
  f = pretrain_testing.hand_batch()
  out = _mask(f, masking.MaskingConfig(vocab_size=VOCAB, mask_token_id=MASK,
                                       max_predictions_per_seq=6,
                                       max_cpc_sentences=0))
  assert out["cpc_weights"].sum() == 0
  assert (out["token_ids"] != MASK).sum() > 0
  for bad in (dict(mask_token_id=VOCAB), dict(masking_rate=0.0),
              dict(mask_token_prob=0.9, random_token_prob=0.2),
              dict(cpc_min_sentence_len=9, cpc_max_sentence_len=8),
              dict(cpc_negatives=-1)):
    args = dict(vocab_size=VOCAB, mask_token_id=MASK)
    args.update(bad)
    with pytest.raises(UserInputError, match="masking"):
      masking.MaskingConfig(**args)
