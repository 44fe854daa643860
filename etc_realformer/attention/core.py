"""The attention core of one branch, written once for every strategy.

ETC attention has four patterns (ETC paper, Sec. 2):

  pattern  queries  keys    extent
  l2l      long     long    a band of radius r (local)
  l2g      long     global  all
  g2g      global   global  all
  g2l      global   long    all

An ETC layer's queries form two branches, each with two patterns that share
ONE softmax: the long branch (l2l, l2g) and the global branch (g2g, g2l).
For a chunk of a branch's queries `attend_branch` computes, in this order:

  scores    S_p = (q.k + q.e[id] + bias[id]) / sqrt(d)     (q comes pre-scaled)
  streams   RealFormer: S'_p = S_p + S'_p(previous layers), carried on
            (`residual_logits`, the rule written once)
  logits    S'_p, or S'_p / n with the running mean; + the mask's -10000
  softmax   one over both patterns' keys (`fused_softmax`); a query whose
            keys are all masked gets zeros
  dropout   seeded, by rows on the sparse path (the same bits whole or in
            chunks)
  context   probs_a @ v_a + probs_b @ v_b

The layouts (see `etc_realformer.attention.blocking`):

  branch  path    queries          first pattern      second pattern
  long    sparse  [B, H, n, b, D]  l2l [B,H,n,b,3b]   l2g [B,H,n,b,G]
  long    full    [B, H, n, D]     l2l [B,H,n,L]      l2g [B,H,n,G]
  global  either  [B, H, n, D]     g2g [B,H,n,G]      g2l [B,H,n,L]

with n the chunk's rows (query blocks of b = r + 1 on the sparse long
branch, queries elsewhere). Each RealFormer stream keeps its pattern's
layout (l2l in the blocked band, never [L, L]).

`attend_branch` is a pure function of its pieces (tensors in, tensors out;
seeded dropout), so the layer can run it whole, or under `chunked_recompute`
in chunks of rows and recomputed in the backward pass, and get the same
numbers (`etc_realformer.attention.layer`). The pieces are typed
(`pieces.BranchInputs` in, `BranchOutputs` out; `chunk_cuts` says how
chunks cut each one); what they hold per pattern is a `PatternPair` in the
order of `BranchSpec.patterns`.
"""

from typing import NamedTuple, Optional, Tuple

import tensorflow as tf

from etc_realformer.attention import blocking
from etc_realformer.attention import dropout as dropout_lib
from etc_realformer.attention.pieces import BranchInputs
from etc_realformer.attention.pieces import BranchOutputs
from etc_realformer.attention.pieces import PatternPair
from etc_realformer.attention.pieces import ScoreInputs
from etc_realformer.attention.relative_table import relative_scores


class StreamSpec(NamedTuple):
  """RealFormer's streams on one branch (static).

  Attributes:
    carried: the branch's patterns whose scores RealFormer carries.
    num_summed: how many layers the new running sums cover (layer index + 1).
    running_mean: softmax the running mean instead of the running sum.
    emit: return the new running sums (False in the last layer, and with
      recomputed streams, whose sums are rebuilt from their sources).
    low_precision: emit the running sums in the compute dtype when that is
      not float32 (`ExecutionConfig.stream_dtype = 'compute'`); the sums
      read back are added in float32 either way.
  """
  carried: Tuple[str, ...] = ()
  num_summed: int = 1
  running_mean: bool = False
  emit: bool = True
  low_precision: bool = False


class ProbsDropout(NamedTuple):
  """Dropout of one branch's attention probabilities (static).

  Attributes:
    rate: the dropout rate.
    training: apply dropout.
    first_site: dropout site of the first pattern (the second is + 1).
    by_rows: draw the mask by rows (`dropout.row_dropout`; the sparse path,
      so chunks see the bits of the whole) or over the whole tensor
      (`dropout.stateless_dropout`; the dense path).
    rng: the masks' generator (`ExecutionConfig.dropout_rng`).
  """
  rate: float = 0.0
  training: bool = False
  first_site: int = 0
  by_rows: bool = True
  rng: str = dropout_lib.PHILOX


class BranchSpec(NamedTuple):
  """What one branch computes (static).

  Attributes:
    patterns: ("l2l", "l2g") or ("g2g", "g2l").
    band: the first pattern is the l2l band in the blocked layout (the
      sparse long branch).
    block_len: b = r + 1 (with `band`).
    streams: the RealFormer streams.
    dropout: the probabilities' dropout.
    return_probs: also return the probabilities (before dropout).
    low_precision_softmax: make and keep the probabilities in the compute
      dtype (`fused_softmax_low`) when that is not float32.
  """
  patterns: Tuple[str, str]
  band: bool = False
  block_len: int = 1
  streams: StreamSpec = StreamSpec()
  dropout: ProbsDropout = ProbsDropout()
  return_probs: bool = False
  low_precision_softmax: bool = False

  @property
  def is_carried(self) -> Tuple[bool, bool]:
    """Per pattern, whether RealFormer carries its scores."""
    return tuple(p in self.streams.carried for p in self.patterns)


# ---------------------------------------------------------------- the rules
def residual_logits(scores: tf.Tensor, previous: Optional[tf.Tensor],
                    carried: bool, num_summed: int, running_mean: bool
                    ) -> Tuple[Optional[tf.Tensor], tf.Tensor]:
  """RealFormer's rule for one pattern: (new running sum or None, logits).

  The sum of this layer's scores and the previous layers' running sum is
  carried on (unmasked); the softmax sees the sum, or with `running_mean`
  the sum divided by the number of layers it covers.
  """
  if not carried:
    return None, scores
  total = scores if previous is None else scores + previous
  if running_mean and num_summed > 1:
    return total, total / float(num_summed)
  return total, total


def fused_softmax(logits_a: tf.Tensor, logits_b: tf.Tensor,
                  valid: tf.Tensor, gain: float = 1.0
                  ) -> Tuple[tf.Tensor, tf.Tensor]:
  """One softmax over the keys of two score tensors, without concatenating.

  Args:
    logits_a: <float32>[..., Ka].
    logits_b: <float32>[..., Kb] (same leading shape).
    valid: <float32> broadcastable to [..., 1]; 0 zeroes a row.
    gain: multiplies the probabilities. Dropout's 1 / P(keep) goes here: it
      then costs a multiply per row, not a pass over every probability (and
      another over its gradient).

  Returns:
    (probs_a, probs_b), <float32>, summing to `gain` per valid row.
  """
  # The max only shifts the exponent (softmax is shift invariant): no gradient.
  peak = tf.stop_gradient(tf.maximum(
      tf.reduce_max(logits_a, -1, keepdims=True),
      tf.reduce_max(logits_b, -1, keepdims=True)))
  exp_a = tf.exp(logits_a - peak)
  exp_b = tf.exp(logits_b - peak)
  total = (tf.reduce_sum(exp_a, -1, keepdims=True) +
           tf.reduce_sum(exp_b, -1, keepdims=True))
  scale = valid / total
  if gain != 1.0:
    scale = scale * gain
  return exp_a * scale, exp_b * scale


def fused_softmax_low(logits_a: tf.Tensor, logits_b: tf.Tensor,
                      valid: tf.Tensor, gain: float, dtype: tf.DType
                      ) -> Tuple[tf.Tensor, tf.Tensor]:
  """`fused_softmax` whose probabilities are made, and kept, in `dtype`.

  The logits, the max and the per-row sums stay float32; only the
  probabilities are rounded to `dtype` (bfloat16 or float16), and the
  gradient is written by hand from them alone, so the backward pass keeps
  one low-precision score-sized tensor per pattern instead of the float32
  exponentials that autodiff would keep
  (`ExecutionConfig.softmax_dtype = 'compute'`).

  Args:
    logits_a, logits_b, valid, gain: as `fused_softmax`.
    dtype: the probabilities' dtype.

  Returns:
    (probs_a, probs_b) <dtype>; gradients w.r.t. the logits are float32.
  """

  @tf.custom_gradient
  def softmax(la, lb, row_valid):
    pa, pb = fused_softmax(la, lb, row_valid, gain)
    pa, pb = tf.cast(pa, dtype), tf.cast(pb, dtype)

    def grad(dpa, dpb):
      # p = gain * softmax(z): dL/dz = p * (dL/dp - sum(dL/dp * p) / gain).
      # Zeroed rows have p = 0 and get no gradient.
      fa, fb = tf.cast(pa, tf.float32), tf.cast(pb, tf.float32)
      ga, gb = tf.cast(dpa, tf.float32), tf.cast(dpb, tf.float32)
      dot = (tf.reduce_sum(ga * fa, -1, keepdims=True) +
             tf.reduce_sum(gb * fb, -1, keepdims=True))
      if gain != 1.0:
        dot = dot / gain
      return fa * (ga - dot), fb * (gb - dot), tf.zeros_like(row_valid)

    return (pa, pb), grad

  return softmax(logits_a, logits_b, valid)


# ------------------------------------------------------------------- scores
def _dense_product(q: tf.Tensor, k: tf.Tensor) -> tf.Tensor:
  """q [B, H, *rows, D] . k [B, H, K, D] -> [B, H, *rows, K].

  Rows are merged into one axis first: one large product instead of a
  broadcast batch of small ones.
  """
  if q.shape.rank == 4:
    return tf.matmul(q, k, transpose_b=True)
  rows = blocking.dims(q)[2:-1]
  flat = blocking.merge_axes(q, 2)
  out = tf.matmul(flat, k, transpose_b=True)
  return tf.reshape(out, blocking.dims(q)[:2] + rows + [blocking.dim(k, 2)])


def _picked(per_id: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
  """Relative scores of pieces with optional query blocks.

  Args:
    per_id: <float32>[B, *rows, R, H].
    ids: <int32>[B, *rows, K].

  Returns:
    <float32>[B, H, *rows, K].
  """
  if ids.shape.rank == 3:
    return relative_scores(per_id, ids)
  picked = relative_scores(blocking.merge_axes(per_id, 1),
                           blocking.merge_axes(ids, 1))
  return blocking.split_axis(picked, 2, blocking.dim(ids, 2))


def branch_scores(spec: BranchSpec, x: ScoreInputs[tf.Tensor],
                  ids: PatternPair[tf.Tensor], size: blocking.Dim,
                  wanted: Tuple[bool, bool] = (True, True)
                  ) -> PatternPair[tf.Tensor]:
  """One layer's scaled scores (q.k + relative) per pattern, before streams
  and masks.

  Args:
    spec: the branch.
    x: the layer's score inputs for the chunk (this layer's, or an earlier
      layer's with recomputed streams).
    ids: the branch's relative ids (shared by every layer).
    size: the chunk's rows.
    wanted: the patterns to score.

  Returns:
    Per wanted pattern, <float32> scores in the branch's layout.
  """
  out = []
  for index, (k, pattern_ids) in enumerate(zip(x.keys, ids)):
    if not wanted[index]:
      out.append(None)
      continue
    band = spec.band and index == 0
    if band:
      scores = tf.matmul(x.q, blocking.band_from_padded(k, 0, size, axis=2),
                         transpose_b=True)
    else:
      scores = _dense_product(x.q, k)
    scores = tf.cast(scores, tf.float32)
    if x.per_id is not None and pattern_ids is not None:
      picked = _picked(x.per_id, pattern_ids)
      if band:  # Window [.., b, 2r+1] -> band [.., b, 3b].
        picked = blocking.skew_right(picked, offset=1,
                                     width=3 * spec.block_len)
      scores += picked
    out.append(scores)
  return PatternPair(*out)


def _previous_sums(spec: BranchSpec, x: BranchInputs[tf.Tensor],
                   size: blocking.Dim) -> PatternPair[tf.Tensor]:
  """The earlier layers' running sums of the carried patterns: the stored
  ones, or recomputed from their score inputs in the order the stored ones
  are built (layer i's scores + the sum before), so they round alike."""
  if not x.sources:
    return x.sums
  acc = [None, None]
  for source in x.sources:
    scores = branch_scores(spec, source, x.masks.ids, size, spec.is_carried)
    for index, carried in enumerate(spec.is_carried):
      if carried:
        acc[index] = (scores[index] if acc[index] is None
                      else scores[index] + acc[index])
  return PatternPair(*acc)


# -------------------------------------------------------------------- core
def attend_branch(spec: BranchSpec, start: blocking.Dim, size: blocking.Dim,
                  x: BranchInputs[tf.Tensor]) -> BranchOutputs[tf.Tensor]:
  """Scores -> streams -> fused softmax -> dropout -> context, for rows
  [start, start + size) of one branch (see the module docstring).

  Args:
    spec: the branch.
    start, size: the chunk's rows (start also places the dropout bits).
    x: the chunk's pieces (`pieces.branch_inputs`).

  Returns:
    The context <T>[B, H, *rows, D]; with `spec.streams.emit`, the new
    running sums of the carried patterns; with `spec.return_probs`, the
    probabilities.
  """
  dtype = x.scores.q.dtype
  logits, sums = _logits_and_sums(spec, x, size, dtype)

  # Dropout's gain rides on the softmax's per-row scale, except when the
  # (undropped) probabilities are returned.
  gain = (1.0 if spec.return_probs
          else dropout_lib.keep_gain(spec.dropout.rate, spec.dropout.training))
  if spec.low_precision_softmax and dtype != tf.float32:
    probs = fused_softmax_low(logits[0], logits[1], x.masks.valid, gain,
                              dtype)
  else:
    probs = fused_softmax(logits[0], logits[1], x.masks.valid, gain)
  returned = None
  if spec.return_probs:
    returned = PatternPair(*(tf.cast(p, tf.float32) for p in probs))

  dropped = [tf.cast(_dropout(spec, p, index, start, x.seed, gain), dtype)
             for index, p in enumerate(probs)]
  return BranchOutputs(ctx=_context(spec, dropped, x.values, size),
                       sums=sums, probs=returned)


def _logits_and_sums(spec: BranchSpec, x: BranchInputs[tf.Tensor],
                     size: blocking.Dim, dtype: tf.DType
                     ) -> Tuple[Tuple[tf.Tensor, tf.Tensor],
                                PatternPair[tf.Tensor]]:
  """Per pattern, the softmax's masked logits and the new running sum (None
  unless carried and emitted)."""
  own = branch_scores(spec, x.scores, x.masks.ids, size)
  previous = _previous_sums(spec, x, size)
  low_streams = spec.streams.low_precision and dtype != tf.float32
  logits, sums = [], []
  for index, carried in enumerate(spec.is_carried):
    prev = previous[index]
    if prev is not None:
      prev = tf.cast(prev, tf.float32)
    new, logit = residual_logits(own[index], prev, carried,
                                 spec.streams.num_summed,
                                 spec.streams.running_mean)
    if not spec.streams.emit or new is None:
      new = None
    elif low_streams:
      new = tf.cast(new, dtype)
    sums.append(new)
    logits.append(logit + x.masks.adders[index])
  return tuple(logits), PatternPair(*sums)


def _dropout(spec: BranchSpec, probs: tf.Tensor, index: int,
             start: blocking.Dim, seed: Optional[tf.Tensor],
             gain: float) -> tf.Tensor:
  """Pattern `index`'s seeded dropout (rows [start, ...) on the sparse
  path); `gain` != 1 when the softmax already applied 1 / P(keep)."""
  d = spec.dropout
  site = d.first_site + index
  if d.by_rows:
    band_block_len = spec.block_len if spec.band and index == 0 else 0
    return dropout_lib.row_dropout(probs, d.rate, seed, site, d.training,
                                   start, prescaled=gain != 1.0, rng=d.rng,
                                   band_block_len=band_block_len)
  return dropout_lib.stateless_dropout(probs, d.rate, seed, site, d.training,
                                       prescaled=gain != 1.0, rng=d.rng)


def _context(spec: BranchSpec, probs: Tuple[tf.Tensor, tf.Tensor],
             values: PatternPair[tf.Tensor], size: blocking.Dim
             ) -> tf.Tensor:
  """probs_a @ v_a + probs_b @ v_b: <T>[B, H, *rows, D]."""
  if spec.band:
    ctx = tf.matmul(probs[0],
                    blocking.band_from_padded(values.first, 0, size, axis=2))
  else:
    ctx = tf.matmul(probs[0], values.first)
  if probs[1].shape.rank == 5:  # Blocked l2g: merge the query blocks.
    ctx += blocking.split_axis(
        tf.matmul(blocking.merge_axes(probs[1], 2), values.second), 2,
        spec.block_len)
  else:
    ctx += tf.matmul(probs[1], values.second)
  return ctx
