"""Masking on the fly: MLM (whole-word) and CPC masks drawn in tf.data.

Why on the fly, not stored: BERT's `create_pretraining_data.py` writes a
few masked copies of every document (`dupe_factor`), so a long run sees the
same masks again and again and the files grow with every copy. Drawn per
batch in the input pipeline (CPU, overlapped with the step), every epoch
sees new masks, the files hold each document once, and the masking settings
are gin options of the run instead of a preprocessing decision. The draws are
stateless (`tf.random.stateless_*`) with seeds (task seed, batch number), so
a run is reproducible given its seed.

Written here rather than with tensorflow_text's `mask_language_model`
(`RandomItemSelector`, `MaskValuesChooser`): those draw with stateful random
ops, so a batch's masks cannot be re-derived from (seed, batch number), and
they select among ids, not positions, so they cannot leave out the CPC
sentences' tokens, which must stay unpredicted.

Per example (`mask_batch`, batched features of `features.feature_spec`):

1. CPC: of the sentences with `cpc_min_sentence_len` to
   `cpc_max_sentence_len` pieces, k = min(max_cpc_sentences, eligible,
   num_sentences - 1, max(1, round(cpc_sentence_rate * num_sentences)))
   are drawn; every long token of theirs becomes [MASK] (their summary
   tokens stay in the global input), and their unmasked pieces are gathered
   into `cpc_token_ids` [C, S] for the model's second pass. An example of
   one sentence gets none (the masked sentence needs a context).
2. MLM: whole words (`word_starts`) of the other real tokens, excluding
   `no_mask_token_ids`, are drawn in random order and taken while their
   pieces fit the budget, round(masking_rate x candidate tokens) capped at
   `max_predictions_per_seq` -- BERT's greedy rule, done as two cumulative-
   sum passes (the second fills what the first left with the words that
   still fit). Each chosen piece becomes [MASK] with `mask_token_prob`, a
   uniformly random id with `random_token_prob`, else stays.

Outputs (besides the stored features, with `token_ids` now masked):
`masked_lm_positions`, `masked_lm_ids` <int32>[B, P], `masked_lm_weights`
<float32>[B, P]; `cpc_global_positions` <int32>[B, C] (the chosen
sentences' global tokens), `cpc_weights` <float32>[B, C], `cpc_token_ids`
<int32>[B, C, S], `cpc_lengths` <int32>[B, C]. Padding slots hold 0.

3. CPC negatives (training only, `cpc_negatives` K > 0): for each CPC
   sentence, the K unmasked sentences of the batch's *other* examples whose
   lengths are nearest to its length (random among ties) join the
   candidates as negatives only: `cpc_negative_token_ids` <int32>[B, C*K,
   S] and `cpc_negative_lengths` <int32>[B, C*K] (0: empty slot). Why: a
   fully masked sentence shows its length, and among the few CPC sentences
   of a training batch the length alone nearly always singles out the true
   one, so InfoNCE has no gradient left to teach the use of the context;
   length-matched negatives take that shortcut away. Other examples only:
   the query's own unmasked neighbours are in its context, so they would be
   the nearest candidates to a context summary for the wrong reason.
   Costs: the choice scores every (CPC sentence, sentence) pair of the
   batch, [B*C, B*G] floats (32 MB at B=64, C=16, G=512; quadratic in the
   per-pipeline batch), and two queries may pick the same sentence, which
   then counts twice among the candidates.
"""

import dataclasses
from typing import Dict, NamedTuple, Sequence

import tensorflow as tf

from etc_realformer.errors import UserInputError
from etc_realformer.features import masks

Features = Dict[str, tf.Tensor]

# The features `mask_batch` adds, with their dtypes and per-example shapes
# as functions of (P, C, S).
OUTPUTS = {
    "masked_lm_positions": (tf.int32, lambda p, c, s: [p]),
    "masked_lm_ids": (tf.int32, lambda p, c, s: [p]),
    "masked_lm_weights": (tf.float32, lambda p, c, s: [p]),
    "cpc_global_positions": (tf.int32, lambda p, c, s: [c]),
    "cpc_weights": (tf.float32, lambda p, c, s: [c]),
    "cpc_token_ids": (tf.int32, lambda p, c, s: [c, s]),
    "cpc_lengths": (tf.int32, lambda p, c, s: [c]),
}
# Added to training batches when `cpc_negatives` > 0, as functions of
# (C*K, S).
NEGATIVE_OUTPUTS = {
    "cpc_negative_token_ids": (tf.int32, lambda n, s: [n, s]),
    "cpc_negative_lengths": (tf.int32, lambda n, s: [n]),
}


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
  """How examples are masked (see the module docstring).

  Attributes:
    vocab_size: random replacements are drawn from [0, vocab_size).
    mask_token_id: the id of [MASK].
    no_mask_token_ids: ids never chosen for MLM (special tokens; padding is
      never chosen anyway).
    masking_rate: the share of candidate tokens MLM predicts.
    max_predictions_per_seq: P, the cap of predictions per example.
    mask_token_prob, random_token_prob: the 80/10/10 split.
    cpc_sentence_rate: the share of sentences masked for CPC.
    max_cpc_sentences: C, the cap of CPC sentences per example (0: no CPC).
    cpc_max_sentence_len: S, the longest sentence CPC masks (the second
      pass's length).
    cpc_min_sentence_len: the shortest.
    cpc_negatives: K, length-matched negatives per CPC sentence from the
      batch's other examples (0: none; step 3 of the module docstring).
  """
  vocab_size: int
  mask_token_id: int
  no_mask_token_ids: Sequence[int] = ()
  masking_rate: float = 0.15
  max_predictions_per_seq: int = 640
  mask_token_prob: float = 0.8
  random_token_prob: float = 0.1
  cpc_sentence_rate: float = 0.1
  max_cpc_sentences: int = 16
  cpc_max_sentence_len: int = 64
  cpc_min_sentence_len: int = 2
  cpc_negatives: int = 0

  def __post_init__(self):
    object.__setattr__(self, "no_mask_token_ids",
                       tuple(int(i) for i in self.no_mask_token_ids))
    def fail(why):
      raise UserInputError(f"masking: {why}")
    if not 0 <= self.mask_token_id < self.vocab_size:
      fail(f"mask_token_id {self.mask_token_id} is not in [0, vocab_size "
           f"{self.vocab_size})")
    if not 0.0 < self.masking_rate < 1.0:
      fail(f"masking_rate must be in (0, 1), got {self.masking_rate}")
    if self.max_predictions_per_seq < 1:
      fail("max_predictions_per_seq must be positive")
    if (self.mask_token_prob < 0 or self.random_token_prob < 0 or
        self.mask_token_prob + self.random_token_prob > 1.0):
      fail(f"mask_token_prob {self.mask_token_prob} + random_token_prob "
           f"{self.random_token_prob} must be probabilities summing to <= 1")
    if not 0.0 <= self.cpc_sentence_rate < 1.0:
      fail(f"cpc_sentence_rate must be in [0, 1), got "
           f"{self.cpc_sentence_rate}")
    if self.max_cpc_sentences < 0:
      fail("max_cpc_sentences must not be negative")
    if not 1 <= self.cpc_min_sentence_len <= self.cpc_max_sentence_len:
      fail(f"need 1 <= cpc_min_sentence_len {self.cpc_min_sentence_len} <= "
           f"cpc_max_sentence_len {self.cpc_max_sentence_len}")
    if self.cpc_negatives < 0:
      fail("cpc_negatives must not be negative")

  def output_spec(self) -> Dict[str, tf.TensorSpec]:
    """Batched specs of the features `mask_batch` adds."""
    p, c, s = (self.max_predictions_per_seq, max(self.max_cpc_sentences, 1),
               self.cpc_max_sentence_len)
    spec = {name: tf.TensorSpec([None] + shape(p, c, s), dtype, name=name)
            for name, (dtype, shape) in OUTPUTS.items()}
    if self.cpc_negatives:
      n = c * self.cpc_negatives
      spec.update({name: tf.TensorSpec([None] + shape(n, s), dtype,
                                       name=name)
                   for name, (dtype, shape) in NEGATIVE_OUTPUTS.items()})
    return spec


def _segment(values: tf.Tensor, segments: tf.Tensor, num_segments: int,
             op) -> tf.Tensor:
  """Per-example segment reduction: [B, L] values and segment ids in
  [0, num_segments) -> [B, num_segments]."""
  batch = tf.shape(values)[0]
  offsets = tf.range(batch)[:, tf.newaxis] * num_segments
  flat = op(tf.reshape(values, [-1]), tf.reshape(segments + offsets, [-1]),
            batch * num_segments)
  return tf.reshape(flat, [batch, num_segments])


def _round(x: tf.Tensor) -> tf.Tensor:
  """Round half up, as int32 (tf.round rounds half to even)."""
  return tf.cast(tf.floor(x + 0.5), tf.int32)


def _gather_sentences(token_ids: tf.Tensor, starts: tf.Tensor,
                      lengths: tf.Tensor, max_len: int) -> tf.Tensor:
  """[B, L] ids, [B, N] sentence starts and lengths (0: empty slot) ->
  [B, N, max_len] the sentences' ids, padded with 0."""
  batch, long_len = tf.shape(token_ids)[0], token_ids.shape[1]
  slots = starts.shape[1]
  offsets = tf.range(max_len)
  positions = tf.minimum(
      starts[:, :, tf.newaxis] + offsets[tf.newaxis, tf.newaxis],
      long_len - 1)
  inside = offsets[tf.newaxis, tf.newaxis] < lengths[:, :, tf.newaxis]
  gathered = tf.gather(token_ids, tf.reshape(positions, [batch, -1]),
                       batch_dims=1)
  return tf.where(inside, tf.reshape(gathered, [batch, slots, max_len]), 0)


def _cpc_negatives(token_ids: tf.Tensor, lengths: tf.Tensor,
                   starts: tf.Tensor, usable: tf.Tensor,
                   cpc_lengths: tf.Tensor, num_negatives: int, max_len: int,
                   seed: tf.Tensor) -> Dict[str, tf.Tensor]:
  """Step 3 of the module docstring.

  Args:
    token_ids: <int32>[B, L] the unmasked ids.
    lengths, starts: <int32>[B, G] every sentence's length and first
      position.
    usable: <bool>[B, G] the sentences that may serve (real, unmasked, of
      1 to max_len pieces).
    cpc_lengths: <int32>[B, C] the CPC sentences' lengths (0: empty slot).
    num_negatives: K.
    max_len: S.
    seed: the stateless seed of the tie-breaking draws.

  Returns:
    `cpc_negative_token_ids` [B, C*K, S], `cpc_negative_lengths` [B, C*K].
  """
  batch = tf.shape(token_ids)[0]
  global_len = lengths.shape[1]
  num_cpc = cpc_lengths.shape[1]
  pool = batch * global_len
  # [B*C, B*G]: nearest length first; a draw in [0, 0.5) breaks ties
  # without reordering different distances.
  distance = tf.abs(tf.reshape(cpc_lengths, [-1, 1]) -
                    tf.reshape(lengths, [1, -1]))
  query_example = tf.repeat(tf.range(batch), num_cpc)
  pool_example = tf.repeat(tf.range(batch), global_len)
  allowed = (tf.reshape(usable, [1, -1]) &
             tf.not_equal(query_example[:, tf.newaxis],
                          pool_example[tf.newaxis]) &
             (tf.reshape(cpc_lengths, [-1, 1]) > 0))
  noise = 0.5 * tf.random.stateless_uniform([batch * num_cpc, pool], seed)
  score = tf.where(allowed, -tf.cast(distance, tf.float32) - noise,
                   -float("inf"))
  k = min(num_negatives, global_len)  # top_k needs k <= the pool's size,
  # and a batch has at least one example of G sentences.
  top, chosen = tf.math.top_k(score, k=k)
  if k < num_negatives:
    top = tf.pad(top, [[0, 0], [0, num_negatives - k]],
                 constant_values=-float("inf"))
    chosen = tf.pad(chosen, [[0, 0], [0, num_negatives - k]])
  valid = tf.math.is_finite(top)
  chosen = tf.where(valid, chosen, 0)
  # Back to per-example rows: [B, C*K] indices into the flat [B*G] pool.
  chosen = tf.reshape(chosen, [batch, num_cpc * num_negatives])
  valid = tf.reshape(valid, [batch, num_cpc * num_negatives])
  neg_lengths = tf.where(valid, tf.gather(tf.reshape(lengths, [-1]), chosen),
                         0)
  neg_starts = tf.gather(tf.reshape(starts, [-1]), chosen)
  long_len = token_ids.shape[1]
  # Positions into the flat [B*L] ids: the pool sentence's example offset.
  flat_starts = neg_starts + (chosen // global_len) * long_len
  ids = _gather_sentences(
      tf.reshape(token_ids, [1, -1]),
      tf.reshape(flat_starts, [1, -1]), tf.reshape(neg_lengths, [1, -1]),
      max_len)
  return {"cpc_negative_token_ids": tf.reshape(
              ids, [batch, num_cpc * num_negatives, max_len]),
          "cpc_negative_lengths": neg_lengths}


class _CpcChoice(NamedTuple):
  """Step 1's choice, per example (see `_choose_cpc`)."""
  lengths: tf.Tensor  # <int32>[B, G] every sentence's real pieces.
  starts: tf.Tensor  # <int32>[B, G] every sentence's first position.
  chosen_global: tf.Tensor  # <int32>[B, C] the CPC sentences (0: empty).
  valid: tf.Tensor  # <bool>[B, C] the slot holds a CPC sentence.
  sentence: tf.Tensor  # <bool>[B, G] the sentence is masked for CPC.
  long: tf.Tensor  # <bool>[B, L] the token is masked for CPC.
  cpc_lengths: tf.Tensor  # <int32>[B, C] (0: empty slot).
  token_ids: tf.Tensor  # <int32>[B, C, S] the sentences' unmasked ids.


def _choose_cpc(token_ids: tf.Tensor, real: tf.Tensor,
                real_global: tf.Tensor, sentence_ids: tf.Tensor,
                positions: tf.Tensor, config: MaskingConfig,
                seed: tf.Tensor) -> _CpcChoice:
  """Step 1 of the module docstring: the CPC sentences of every example."""
  batch = tf.shape(token_ids)[0]
  long_len = token_ids.shape[1]
  global_len = real_global.shape[1]
  lengths = _segment(tf.cast(real, tf.int32), sentence_ids, global_len,
                     tf.math.unsorted_segment_sum)
  starts = _segment(tf.where(real, positions, long_len), sentence_ids,
                    global_len, tf.math.unsorted_segment_min)
  starts = tf.minimum(starts, long_len - 1)
  num_cpc = max(config.max_cpc_sentences, 1)
  max_len = config.cpc_max_sentence_len
  eligible = (real_global & (lengths >= config.cpc_min_sentence_len) &
              (lengths <= max_len))
  num_sentences = tf.reduce_sum(tf.cast(real_global, tf.int32), axis=1)
  wanted = tf.maximum(_round(config.cpc_sentence_rate *
                             tf.cast(num_sentences, tf.float32)), 1)
  k = tf.minimum(tf.minimum(wanted, num_sentences - 1), tf.minimum(
      tf.reduce_sum(tf.cast(eligible, tf.int32), axis=1),
      config.max_cpc_sentences))
  if config.cpc_sentence_rate == 0:
    k = tf.zeros_like(k)
  draws = tf.random.stateless_uniform([batch, global_len], seed)
  scores = tf.where(eligible, draws, -1.0)
  top, chosen_global = tf.math.top_k(scores, k=min(num_cpc, global_len))
  if num_cpc > global_len:  # More slots than sentences: pad the slots.
    pad = [[0, 0], [0, num_cpc - global_len]]
    top = tf.pad(top, pad, constant_values=-1.0)
    chosen_global = tf.pad(chosen_global, pad)
  valid = (tf.range(num_cpc)[tf.newaxis] < k[:, tf.newaxis]) & (top >= 0)
  chosen_global = tf.where(valid, chosen_global, 0)
  sentence = tf.reduce_max(
      tf.one_hot(chosen_global, global_len, dtype=tf.int32) *
      tf.cast(valid, tf.int32)[:, :, tf.newaxis], axis=1) > 0
  cpc_lengths = tf.where(valid,
                         tf.gather(lengths, chosen_global, batch_dims=1), 0)
  cpc_starts = tf.gather(starts, chosen_global, batch_dims=1)
  return _CpcChoice(
      lengths=lengths, starts=starts, chosen_global=chosen_global,
      valid=valid, sentence=sentence,
      long=tf.gather(sentence, sentence_ids, batch_dims=1) & real,
      cpc_lengths=cpc_lengths,
      token_ids=_gather_sentences(token_ids, cpc_starts, cpc_lengths,
                                  max_len))


def _choose_mlm_tokens(real: tf.Tensor, candidate: tf.Tensor,
                       word_starts: tf.Tensor, sentence_ids: tf.Tensor,
                       config: MaskingConfig, seed: tf.Tensor) -> tf.Tensor:
  """Step 2's choice: <bool>[B, L] the tokens of the drawn whole words.

  Args:
    real: <bool>[B, L] the real (non-padding) tokens.
    candidate: <bool>[B, L] the tokens MLM may predict.
    word_starts: [B, L] nonzero at every word's first piece.
    sentence_ids: <int32>[B, L].
    config: the masking settings.
    seed: the stateless seed of the words' order.
  """
  batch = tf.shape(real)[0]
  long_len = real.shape[1]
  # Words: a new one at every word start and every sentence start; padding
  # gets its own segment (long_len).
  new_sentence = tf.concat(
      [tf.ones([batch, 1], tf.bool),
       tf.not_equal(sentence_ids[:, 1:], sentence_ids[:, :-1])], axis=1)
  word_start = (tf.cast(word_starts, tf.int32) > 0) | new_sentence
  word_index = tf.cumsum(tf.cast(word_start, tf.int32), axis=1) - 1
  word_index = tf.where(real, word_index, long_len)
  num_words = long_len + 1
  word_len = _segment(tf.cast(real, tf.int32), word_index, num_words,
                      tf.math.unsorted_segment_sum)
  word_candidates = _segment(tf.cast(candidate, tf.int32), word_index,
                             num_words, tf.math.unsorted_segment_sum)
  # A word is drawn only if all its pieces are candidates.
  word_ok = (word_len > 0) & tf.equal(word_candidates, word_len)
  num_candidates = tf.reduce_sum(tf.cast(candidate, tf.int32), axis=1)
  budget = tf.minimum(_round(config.masking_rate *
                             tf.cast(num_candidates, tf.float32)),
                      config.max_predictions_per_seq)
  budget = tf.where(num_candidates > 0, tf.maximum(budget, 1), 0)
  order = tf.argsort(tf.where(
      word_ok, tf.random.stateless_uniform([batch, num_words], seed),
      2.0), axis=1, stable=True)
  sorted_len = tf.gather(tf.where(word_ok, word_len, 0), order, batch_dims=1)
  # BERT's greedy rule in two passes: the words that fit in draw order, then
  # the later words that still fit what the first pass left.
  first = (tf.cumsum(sorted_len, axis=1) <= budget[:, tf.newaxis]) & (
      sorted_len > 0)
  left = budget - tf.reduce_sum(tf.where(first, sorted_len, 0), axis=1)
  fits = tf.where(~first & (sorted_len <= left[:, tf.newaxis]), sorted_len, 0)
  second = (tf.cumsum(fits, axis=1) <= left[:, tf.newaxis]) & (fits > 0)
  chosen_sorted = first | second
  chosen_word = tf.gather(chosen_sorted, tf.argsort(order, axis=1),
                          batch_dims=1)
  return tf.gather(chosen_word, word_index, batch_dims=1) & candidate


def _prediction_slots(token_ids: tf.Tensor, chosen: tf.Tensor,
                      positions: tf.Tensor, num_predictions: int):
  """The chosen positions first, in order, then the rest, in P slots.

  Returns:
    (masked_lm_positions, masked_lm_ids, whether the slot is used), each
    [B, P]; unused slots hold 0.
  """
  long_len = token_ids.shape[1]
  key = tf.where(chosen, positions, positions + long_len)
  slots = tf.argsort(key, axis=1, stable=True)
  if num_predictions <= long_len:
    slots = slots[:, :num_predictions]
  else:
    slots = tf.pad(slots, [[0, 0], [0, num_predictions - long_len]])
  slot_chosen = tf.gather(chosen, slots, batch_dims=1)
  if num_predictions > long_len:
    slot_chosen &= tf.range(num_predictions)[tf.newaxis] < long_len
  masked_lm_positions = tf.where(slot_chosen, slots, 0)
  masked_lm_ids = tf.where(
      slot_chosen, tf.gather(token_ids, masked_lm_positions, batch_dims=1), 0)
  return masked_lm_positions, masked_lm_ids, slot_chosen


def _replace_chosen(token_ids: tf.Tensor, chosen: tf.Tensor,
                    cpc_long: tf.Tensor, config: MaskingConfig,
                    draw_seed: tf.Tensor, random_seed: tf.Tensor
                    ) -> tf.Tensor:
  """The masked ids: MLM's 80/10/10 replacement, CPC's tokens all [MASK]."""
  batch = tf.shape(token_ids)[0]
  long_len = token_ids.shape[1]
  draw = tf.random.stateless_uniform([batch, long_len], draw_seed)
  random_ids = tf.random.stateless_uniform(
      [batch, long_len], random_seed, minval=0, maxval=config.vocab_size,
      dtype=tf.int32)
  to_mask = chosen & (draw < config.mask_token_prob)
  to_random = chosen & (draw >= config.mask_token_prob) & (
      draw < config.mask_token_prob + config.random_token_prob)
  masked = tf.where(to_mask, config.mask_token_id,
                    tf.where(to_random, random_ids, token_ids))
  return tf.where(cpc_long, config.mask_token_id, masked)


def mask_batch(features: Features, config: MaskingConfig,
               seed: tf.Tensor) -> Features:
  """Masks a batch (see the module docstring).

  Args:
    features: batched features of `features.feature_spec` (others pass
      through).
    config: the masking settings.
    seed: <int32/int64>[2], the stateless seed of this batch.

  Returns:
    The features with `token_ids` masked and the `OUTPUTS` added
    (`word_starts` dropped: the model does not read it).
  """
  seeds = tf.random.experimental.stateless_split(
      tf.cast(seed, tf.int64), num=6)
  token_ids = tf.cast(features["token_ids"], tf.int32)
  batch = tf.shape(token_ids)[0]
  long_len = token_ids.shape[1]
  global_len = features["global_token_ids"].shape[1]
  real = masks.example_ids_from_breakpoints(features["long_breakpoints"]) > 0
  real_global = masks.example_ids_from_breakpoints(
      features["global_breakpoints"]) > 0
  sentence_ids = tf.clip_by_value(tf.cast(features["sentence_ids"], tf.int32),
                                  0, global_len - 1)
  positions = tf.broadcast_to(tf.range(long_len)[tf.newaxis], [batch,
                                                              long_len])
  cpc = _choose_cpc(token_ids, real, real_global, sentence_ids, positions,
                    config, seeds[0])

  special = tf.zeros_like(real)
  for token in config.no_mask_token_ids:
    special |= tf.equal(token_ids, token)
  candidate = real & ~cpc.long & ~special
  chosen = _choose_mlm_tokens(real, candidate, features["word_starts"],
                              sentence_ids, config, seeds[1])
  masked_lm_positions, masked_lm_ids, slot_chosen = _prediction_slots(
      token_ids, chosen, positions, config.max_predictions_per_seq)

  out = {k: v for k, v in features.items() if k != "word_starts"}
  out.update(
      token_ids=_replace_chosen(token_ids, chosen, cpc.long, config,
                                seeds[2], seeds[3]),
      masked_lm_positions=masked_lm_positions,
      masked_lm_ids=masked_lm_ids,
      masked_lm_weights=tf.cast(slot_chosen, tf.float32),
      cpc_global_positions=cpc.chosen_global,
      cpc_weights=tf.cast(cpc.valid, tf.float32),
      cpc_token_ids=cpc.token_ids,
      cpc_lengths=cpc.cpc_lengths)
  if config.cpc_negatives:
    max_len = config.cpc_max_sentence_len
    usable = real_global & ~cpc.sentence & (cpc.lengths >= 1) & (
        cpc.lengths <= max_len)
    out.update(_cpc_negatives(token_ids, cpc.lengths, cpc.starts, usable,
                              cpc.cpc_lengths, config.cpc_negatives, max_len,
                              seeds[4]))
  return out
