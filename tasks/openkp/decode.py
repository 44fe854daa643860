"""Decoding (start word, length) logits into the top distinct keyphrases.

As the original: cells are ranked by logit; each becomes the lower-cased
words it covers joined by spaces; repeats of a phrase already taken are
skipped; the first `num_phrases` (5) distinct phrases are the prediction.
Only the `num_candidates` (original: 100) best cells are considered. Cells
past the kept words, or covering an empty word (from a double space in the
text; the official scorer drops such phrases), are never predicted.

`top_phrases` is the in-graph version (eval metrics, predict, serving);
`top_phrases_py` the NumPy/Python one the tests check it against.
"""

from typing import List, Sequence, Tuple

import numpy as np
import tensorflow as tf

NUM_PHRASES = 5
NUM_CANDIDATES = 100


def cell_validity(words: tf.Tensor, num_words: tf.Tensor,
                  max_phrase_words: int, length: int) -> tf.Tensor:
  """<bool>[B, N, length]: cell (n-1, s) covers words s..s+n-1, all kept and
  non-empty.

  Args:
    words: <string>[B, W] kept words ("" padding past `num_words`).
    num_words: <int32>[B].
    max_phrase_words: N.
    length: the word axis length of the logits (L).
  """
  width = tf.shape(words)[1]
  positions = tf.range(length)
  nonempty = tf.strings.length(words) > 0  # [B, W]
  nonempty = tf.pad(nonempty, [[0, 0], [0, tf.maximum(length - width, 0)]])
  nonempty = nonempty[:, :length]
  nonempty &= positions[tf.newaxis] < num_words[:, tf.newaxis]
  rows = []
  ok = nonempty
  for n in range(max_phrase_words):
    if n:
      # Cell (n, s) also needs word s + n.
      shifted = tf.pad(nonempty[:, n:], [[0, 0], [0, n]])
      ok = ok & shifted
    rows.append(ok)
  return tf.stack(rows, axis=1)


def top_phrases(logits: tf.Tensor, words: tf.Tensor, num_words: tf.Tensor,
                num_phrases: int = NUM_PHRASES,
                num_candidates: int = NUM_CANDIDATES
                ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
  """The best distinct lower-cased phrases, in the graph.

  Args:
    logits: <float32>[B, N, L] logit of the (n+1)-word phrase at word s.
    words: <string>[B, W] kept words, W <= L ("" padding).
    num_words: <int32>[B] kept words per example.
    num_phrases: K, phrases returned.
    num_candidates: cells considered (the best ones).

  Returns:
    phrases <string>[B, K] ("" when fewer), scores <float32>[B, K] (the
    cell's probability under the softmax over all cells; 0 when fewer),
    starts <int32>[B, K] and lengths <int32>[B, K] (-1 when fewer).
  """
  logits = tf.cast(logits, tf.float32)
  num_words = tf.cast(num_words, tf.int32)
  # One padding column, so that gathers work for a document without words.
  words = tf.pad(words, [[0, 0], [0, 1]])
  max_words = logits.shape[1]
  length = logits.shape[2] or tf.shape(logits)[2]
  batch = tf.shape(logits)[0]
  valid = cell_validity(words, num_words, max_words, length)
  flat = tf.reshape(logits, [batch, -1])
  probs = tf.nn.softmax(flat, axis=-1)
  masked = tf.where(tf.reshape(valid, [batch, -1]), flat, -np.inf)
  k = tf.minimum(num_candidates, tf.shape(flat)[1])
  top_logits, top_cells = tf.math.top_k(masked, k=k)  # [B, C]
  cell_ok = top_logits > -np.inf
  n_minus_1 = top_cells // length
  starts = top_cells % length
  lengths = n_minus_1 + 1
  # Phrase text: words s..s+n-1, lower-cased, joined by single spaces.
  words_lower = tf.strings.lower(words, encoding="utf-8")
  width = tf.shape(words)[1]
  parts = []
  for j in range(max_words):
    index = tf.minimum(starts + j, width - 1)
    word = tf.gather(words_lower, index, batch_dims=1)
    word = word if j == 0 else tf.strings.join([" ", word])
    parts.append(tf.where(j < lengths, word, ""))
  phrases = tf.strings.join(parts)
  phrases = tf.where(cell_ok, phrases, "")
  # Keep the first occurrence of each phrase, then the first K of those.
  same = tf.equal(phrases[:, :, tf.newaxis], phrases[:, tf.newaxis, :])
  earlier = tf.linalg.band_part(tf.ones([k, k], tf.bool), -1, 0) & ~tf.eye(
      k, dtype=tf.bool)  # [i, j]: j < i
  repeated = tf.reduce_any(same & earlier[tf.newaxis], axis=-1)
  keep = cell_ok & ~repeated
  rank = tf.cumsum(tf.cast(keep, tf.int32), axis=-1) - 1
  keep &= rank < num_phrases
  # Scatter the kept candidates to their rank (slot K collects the rest).
  slot = tf.where(keep, rank, num_phrases)
  batch_index = tf.broadcast_to(tf.range(batch)[:, tf.newaxis], tf.shape(slot))
  index = tf.stack([batch_index, slot], axis=-1)
  shape = tf.stack([batch, num_phrases + 1])

  def scatter(values, default):
    base = tf.fill(shape, tf.constant(default, values.dtype))
    return tf.tensor_scatter_nd_update(
        base, tf.boolean_mask(index, keep), tf.boolean_mask(values, keep)
    )[:, :num_phrases]

  top_probs = tf.gather(probs, top_cells, batch_dims=1)
  return (scatter(phrases, ""), scatter(top_probs, 0.0),
          scatter(starts, -1), scatter(lengths, -1))


def top_phrases_py(logits: np.ndarray, words: Sequence[str],
                   num_phrases: int = NUM_PHRASES,
                   num_candidates: int = NUM_CANDIDATES
                   ) -> List[Tuple[str, int, int, float]]:
  """One example's decoding in Python: [(phrase, start, length, logit)].

  Args:
    logits: [N, L] logits, cell (n-1, s) = the n-word phrase at word s.
    words: the kept words.
  """
  max_words, length = logits.shape
  cells = []
  for n in range(1, max_words + 1):
    for s in range(length):
      span = list(words[s:s + n])
      if len(span) == n and all(span):
        cells.append((float(logits[n - 1, s]), (n - 1) * length + s, s, n))
  # Ties broken by cell index, as tf.math.top_k does.
  cells.sort(key=lambda c: (-c[0], c[1]))
  out, seen = [], set()
  for logit, _, s, n in cells[:num_candidates]:
    phrase = " ".join(words[s:s + n]).lower()
    if phrase in seen:
      continue
    seen.add(phrase)
    out.append((phrase, s, n, logit))
    if len(out) == num_phrases:
      break
  return out
