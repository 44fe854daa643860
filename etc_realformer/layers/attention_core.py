"""The attention core of one query side, written once for every strategy.

ETC attention has four patterns (ETC paper, Sec. 2):

  pattern  queries  keys    extent
  l2l      long     long    a band of radius r (local)
  l2g      long     global  all
  g2g      global   global  all
  g2l      global   long    all

A query side holds two patterns that share ONE softmax: the long side
(l2l, l2g) and the global side (g2g, g2l). For a chunk of a side's queries
`attend_side` computes, in this order:

  scores    S_p = (q.k + q.e[id] + bias[id]) / sqrt(d)     (q comes pre-scaled)
  streams   RealFormer: S'_p = S_p + S'_p(previous layers), carried on
            (`residual_logits`, the rule written once)
  logits    S'_p, or S'_p / n with the running mean; + the mask's -10000
  softmax   one over both patterns' keys (`fused_softmax`); a query whose
            keys are all masked gets zeros
  dropout   seeded, by rows on the sparse path (the same bits whole or in
            chunks)
  context   probs_a @ v_a + probs_b @ v_b

The layouts (see `etc_realformer.layers.blocking`):

  side    path    queries          first pattern      second pattern
  long    sparse  [B, H, n, b, D]  l2l [B,H,n,b,3b]   l2g [B,H,n,b,G]
  long    full    [B, H, n, D]     l2l [B,H,n,L]      l2g [B,H,n,G]
  global  either  [B, H, n, D]     g2g [B,H,n,G]      g2l [B,H,n,L]

with n the chunk's rows (query blocks of b = r + 1 on the sparse long side,
queries elsewhere). Each RealFormer stream keeps its pattern's layout (l2l in
the blocked band, never [L, L]).

`attend_side` is a pure function of its pieces (tensors in, tensors out;
seeded dropout), so the layer can run it whole, or under `chunked_recompute`
in chunks of rows and recomputed in the backward pass, and get the same
numbers (`etc_realformer.layers.attention`). `side_inputs` says how each
piece is cut into chunks.
"""

from typing import Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

from etc_realformer.layers import blocking
from etc_realformer.layers import dropout as dropout_lib
from etc_realformer.layers.chunking import ChunkInput
from etc_realformer.layers.relative_table import relative_scores

Pieces = Mapping[str, tf.Tensor]


class SideSpec(NamedTuple):
  """What one query side computes (static).

  Attributes:
    patterns: ("l2l", "l2g") or ("g2g", "g2l").
    band: the first pattern is the l2l band in the blocked layout (the
      sparse long side).
    block_len: b = r + 1 (with `band`).
    carried: the side's patterns whose scores RealFormer carries.
    num_summed: how many layers the new running sums cover (layer index + 1).
    running_mean: softmax the running mean instead of the running sum.
    emit: return the new running sums (False in the last layer).
    num_sources: with recomputed streams, how many earlier layers' score
      inputs the pieces hold (named `src<i>/...`); 0 = the stored sums
      (`stream/<pattern>`) are pieces instead.
    rate: attention-probability dropout rate.
    training: apply dropout.
    first_site: dropout site of the first pattern (the second is + 1).
    by_rows: draw the dropout mask by rows (`dropout.row_dropout`; the
      sparse path, so chunks see the bits of the whole) or over the whole
      tensor (`dropout.stateless_dropout`; the dense path).
    return_probs: also return the probabilities (before dropout).
    low_precision_softmax: make and keep the probabilities in the compute
      dtype (`fused_softmax_low`) when that is not float32.
    low_precision_streams: emit the running sums in the compute dtype when
      that is not float32 (`ExecutionConfig.stream_dtype = 'compute'`); the
      sums read back are added in float32 either way.
    dropout_rng: the masks' generator (`ExecutionConfig.dropout_rng`).
  """
  patterns: Tuple[str, str]
  band: bool = False
  block_len: int = 1
  carried: Tuple[str, ...] = ()
  num_summed: int = 1
  running_mean: bool = False
  emit: bool = True
  num_sources: int = 0
  rate: float = 0.0
  training: bool = False
  first_site: int = 0
  by_rows: bool = True
  return_probs: bool = False
  low_precision_softmax: bool = False
  low_precision_streams: bool = False
  dropout_rng: str = "philox"


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


def side_scores(spec: SideSpec, x: Pieces, size: blocking.Dim,
                prefix: str = "",
                patterns: Optional[Sequence[str]] = None
                ) -> Dict[str, tf.Tensor]:
  """One layer's scaled scores (q.k + relative) per pattern, before streams
  and masks.

  Args:
    spec: the side.
    x: the chunk's pieces; this layer's are named `prefix` + `q`,
      `<pattern>_k`, `per_id`; the ids `<pattern>_ids` are shared by layers.
    size: the chunk's rows.
    prefix: "" for this layer, `src<i>/` for an earlier layer's inputs.
    patterns: the patterns wanted (default both).

  Returns:
    dict pattern -> <float32> scores in the side's layout.
  """
  q = x[prefix + "q"]
  per_id = x.get(prefix + "per_id")
  out = {}
  for pattern in patterns or spec.patterns:
    k = x[prefix + pattern + "_k"]
    band = spec.band and pattern == spec.patterns[0]
    if band:
      scores = tf.matmul(q, blocking.band_from_padded(k, 0, size, axis=2),
                         transpose_b=True)
    else:
      scores = _dense_product(q, k)
    scores = tf.cast(scores, tf.float32)
    ids = x.get(pattern + "_ids")
    if per_id is not None and ids is not None:
      picked = _picked(per_id, ids)
      if band:  # Window [.., b, 2r+1] -> band [.., b, 3b].
        picked = blocking.skew_right(picked, offset=1,
                                     width=3 * spec.block_len)
      scores += picked
    out[pattern] = scores
  return out


def _previous_streams(spec: SideSpec, x: Pieces, size: blocking.Dim
                      ) -> Dict[str, tf.Tensor]:
  """The earlier layers' running sums of the carried patterns: the stored
  ones, or recomputed from their score inputs in the order the stored ones
  are built (layer i's scores + the sum before), so they round alike."""
  if not spec.num_sources:
    return {p: x["stream/" + p] for p in spec.carried
            if "stream/" + p in x}
  acc = {}
  for i in range(spec.num_sources):
    scores = side_scores(spec, x, size, f"src{i}/", spec.carried)
    for p in spec.carried:
      acc[p] = scores[p] if i == 0 else scores[p] + acc[p]
  return acc


# -------------------------------------------------------------------- core
def attend_side(spec: SideSpec, start: blocking.Dim, size: blocking.Dim,
                x: Pieces) -> Dict[str, tf.Tensor]:
  """Scores -> streams -> fused softmax -> dropout -> context, for rows
  [start, start + size) of one side (see the module docstring).

  Args:
    spec: the side.
    start, size: the chunk's rows (start also places the dropout bits).
    x: the chunk's pieces (see `side_inputs`).

  Returns:
    `ctx` <T>[B, H, *rows, D]; with `spec.emit`, `stream/<pattern>` (the new
    running sums of the carried patterns); with `spec.return_probs`,
    `probs/<pattern>`.
  """
  a, b = spec.patterns
  own = side_scores(spec, x, size)
  previous = _previous_streams(spec, x, size)
  dtype = x["q"].dtype
  low_streams = spec.low_precision_streams and dtype != tf.float32
  out, logits = {}, []
  for pattern in spec.patterns:
    prev = previous.get(pattern)
    if prev is not None:
      prev = tf.cast(prev, tf.float32)
    new, logit = residual_logits(own[pattern], prev,
                                 pattern in spec.carried, spec.num_summed,
                                 spec.running_mean)
    if spec.emit and new is not None:
      out["stream/" + pattern] = tf.cast(new, dtype) if low_streams else new
    logits.append(logit + x[pattern + "_adder"])

  # Dropout's gain rides on the softmax's per-row scale, except when the
  # (undropped) probabilities are returned.
  gain = (1.0 if spec.return_probs
          else dropout_lib.keep_gain(spec.rate, spec.training))
  if spec.low_precision_softmax and dtype != tf.float32:
    probs = fused_softmax_low(logits[0], logits[1], x["valid"], gain, dtype)
  else:
    probs = fused_softmax(logits[0], logits[1], x["valid"], gain)
  if spec.return_probs:
    out["probs/" + a], out["probs/" + b] = (tf.cast(p, tf.float32)
                                            for p in probs)

  dropped = []
  for k, p in enumerate(probs):
    site = spec.first_site + k
    if spec.by_rows:
      p = dropout_lib.row_dropout(p, spec.rate, x.get("seed"), site,
                                  spec.training, start,
                                  prescaled=gain != 1.0,
                                  rng=spec.dropout_rng)
    else:
      p = dropout_lib.stateless_dropout(p, spec.rate, x.get("seed"), site,
                                        spec.training,
                                        prescaled=gain != 1.0,
                                        rng=spec.dropout_rng)
    dropped.append(tf.cast(p, dtype))

  if spec.band:
    ctx = tf.matmul(dropped[0],
                    blocking.band_from_padded(x[a + "_v"], 0, size, axis=2))
  else:
    ctx = tf.matmul(dropped[0], x[a + "_v"])
  if dropped[1].shape.rank == 5:  # Blocked l2g: merge the query blocks.
    ctx += blocking.split_axis(
        tf.matmul(blocking.merge_axes(dropped[1], 2), x[b + "_v"]), 2,
        spec.block_len)
  else:
    ctx += tf.matmul(dropped[1], x[b + "_v"])
  out["ctx"] = ctx
  return out


# ------------------------------------------------------------------ pieces
def side_inputs(spec: SideSpec, tensors: Mapping[str, tf.Tensor],
                side_masks: Mapping[str, Optional[tf.Tensor]],
                streams: Mapping[str, tf.Tensor],
                sources: Sequence[Mapping[str, tf.Tensor]] = (),
                seed: Optional[tf.Tensor] = None
                ) -> Tuple[Dict[str, ChunkInput], Dict[str, ChunkInput]]:
  """The pieces of one side and how chunks cut them.

  Args:
    spec: the side.
    tensors: this layer's `q` [B, H, N, D] (pre-scaled) and the
      `<pattern>_k` / `<pattern>_v` [B, H, K, D] of the side's patterns,
      optionally `per_id` [B, N, R, H].
    side_masks: `<pattern>_adder`, `valid`, `<pattern>_ids` (None: no
      relative term) in the side's layout (`attention_inputs`).
    streams: the stored running sums of the carried patterns (when
      `spec.num_sources` is 0).
    sources: the earlier layers' score inputs, dicts like `tensors` (when
      `spec.num_sources` > 0).
    seed: the call's dropout seed.

  Returns:
    (inputs, consts): name -> `ChunkInput`; consts get no gradient.
  """
  a, _ = spec.patterns
  b_len = spec.block_len
  # Without ids the relative tables take no part (and get no gradient).
  has_ids = any(side_masks.get(p + "_ids") is not None
                for p in spec.patterns)

  def score_inputs(t, prefix, patterns):
    out = {}
    q = t["q"]
    if spec.band:  # [B, H, L, D] -> query blocks [B, H, nb, b, D].
      q = blocking.split_into_blocks(q, b_len, axis=2)
    out[prefix + "q"] = ChunkInput(q)
    for p in patterns:
      if spec.band and p == a:
        out[prefix + p + "_k"] = ChunkInput(
            blocking.padded_blocks(t[p + "_k"], b_len, axis=2), "halo", 2, 1)
      else:
        out[prefix + p + "_k"] = ChunkInput(t[p + "_k"], "shared")
    if has_ids and t.get("per_id") is not None:
      per_id = t["per_id"]
      if spec.band:  # [B, L, R, H] -> [B, nb, b, R, H]
        per_id = blocking.split_into_blocks(per_id, b_len, axis=1)
      out[prefix + "per_id"] = ChunkInput(per_id, axis=1)
    return out

  inputs = score_inputs(tensors, "", spec.patterns)
  for p in spec.patterns:
    if spec.band and p == a:
      inputs[p + "_v"] = ChunkInput(
          blocking.padded_blocks(tensors[p + "_v"], b_len, axis=2), "halo",
          2, 1)
    else:
      inputs[p + "_v"] = ChunkInput(tensors[p + "_v"], "shared")
  if spec.num_sources:
    for i, src in enumerate(sources):
      inputs.update(score_inputs(src, f"src{i}/", spec.carried))
  else:
    for p in spec.carried:
      if p in streams:
        inputs["stream/" + p] = ChunkInput(streams[p])

  consts = {"valid": ChunkInput(side_masks["valid"])}
  for p in spec.patterns:
    consts[p + "_adder"] = ChunkInput(side_masks[p + "_adder"])
    if side_masks.get(p + "_ids") is not None:
      consts[p + "_ids"] = ChunkInput(side_masks[p + "_ids"], axis=1)
  if seed is not None:
    consts["seed"] = ChunkInput(seed, "shared")
  return inputs, consts
