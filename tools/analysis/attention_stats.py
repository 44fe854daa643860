"""The RealFormer paper's attention statistics for ETC, computed streaming.

Per query row (a token), layer and head, as the RealFormer paper (He et al.,
2021, Sec. 4.4) measured BERT:

* entropy: H(p) = -sum_k p_k ln p_k, in nats, of the row's attention
  distribution. An ETC query branch holds two patterns under ONE softmax, so
  the distribution is fused: a long query's keys are its l2l window and the
  global tokens (l2l + l2g), a global query's keys are the global and the
  long tokens (g2g + g2l); its probabilities over both sum to 1. A row sees
  K keys (its unmasked ones), so 0 <= H <= ln K.
* JSD: the Jensen-Shannon divergence, in nats (so in [0, ln 2]), between the
  same head's fused rows of one token in layers l and l + 1 (the masks are
  the same in every layer).

Rows left out, and counted: padding tokens, and fully masked rows (K = 0; the
model gives them all-zero probabilities).

Colours, by a violin's median as the paper's: blue below the low threshold,
yellow between, red above the high one. The paper's entropy thresholds, 1.5
and 4.5 nats, were for 512 keys; here they are 1.5 / ln 512 and 4.5 / ln 512
times the mean ln K of the branch's rows. Its JSD thresholds, 0.25 and 0.75 of
the maximum, are 0.25 ln 2 and 0.75 ln 2 nats.

The per-row numbers are computed in TensorFlow (on the accelerator, inside
the caller's `tf.function`): only [B, H, N] values per layer leave the
device, never the probabilities. They then stream into `StreamingSummary`:
per (layer, head) a fixed histogram of `bins` equal bins over [0, upper],
plus the exact count, sum, min and max. Its memory does not grow with the
number of rows; the mean and count are exact and the quantiles (median,
quartiles) are exact up to one bin width (`upper / bins`).
"""

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from etc_realformer.attention import blocking

# Query branch -> its two patterns, in the order the model fuses them.
BRANCHES: Dict[str, Tuple[str, str]] = {"long": ("l2l", "l2g"),
                                     "global": ("g2g", "g2l")}

# The paper's colour thresholds for entropy (nats), for 512-token BERT rows.
PAPER_KEYS = 512
PAPER_ENTROPY_THRESHOLDS = (1.5, 4.5)
# The paper's JSD thresholds, 0.25 and 0.75 on a scale whose maximum is 1
# (base-2 JSD), as fractions of the maximum ln 2 of the nats used here.
JSD_THRESHOLDS = (0.25 * math.log(2.0), 0.75 * math.log(2.0))
# Colours by median, as the paper: low (sparse) blue, high (broad) red.
COLOURS = {"low": "#3b75af", "mid": "#f2c94c", "high": "#c0392b"}


# ------------------------------------------------------------ TF, per row
def key_masks(side_inputs: Mapping[str, Optional[tf.Tensor]],
              probs: Mapping[str, tf.Tensor], local_radius: int
              ) -> Dict[str, Tuple[tf.Tensor, tf.Tensor]]:
  """<float32> key masks of each branch's two patterns, in the probabilities'
  layouts.

  Args:
    side_inputs: the side inputs (`l2l_att_mask` <int>[B, L, 2r+1], `l2g_att_mask`
      [B, L, G], `g2g_att_mask` [B, G, G], `g2l_att_mask` [B, G, L]); a
      missing or None mask allows every key.
    probs: one layer's probabilities (`EtcModel.call`): l2l [B, H, L, 2r+1]
      (slot j of row i is long position i - r + j), l2g [B, H, L, G], g2g
      [B, H, G, G], g2l [B, H, G, L].
    local_radius: r.

  Returns:
    {"long": ([B, L, 2r+1] with slots outside the sequence 0, [B, L, G]),
     "global": ([B, G, G], [B, G, L])}.
  """
  def mask(pattern):
    value = side_inputs.get(f"{pattern}_att_mask")
    if value is None:
      shape = tf.shape(probs[pattern])
      return tf.ones([shape[0], shape[2], shape[3]], tf.float32)
    return tf.cast(value, tf.float32)

  # Window slots past either end are no keys, whatever the mask says.
  in_range = blocking.window_in_range_mask(tf.shape(probs["l2l"])[2],
                                           local_radius)
  l2l = mask("l2l") * tf.cast(in_range, tf.float32)
  return {"long": (l2l, mask("l2g")), "global": (mask("g2g"), mask("g2l"))}


def key_counts(mask_a: tf.Tensor, mask_b: tf.Tensor) -> tf.Tensor:
  """K, the keys a row sees: <float32>[B, N] from masks [B, N, Ka], [B, N,
  Kb]."""
  return tf.reduce_sum(mask_a, -1) + tf.reduce_sum(mask_b, -1)


def _masked(p: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
  # Masked keys hold ~exp(-10000) already; zero them exactly.
  return tf.cast(p, tf.float32) * tf.cast(mask, tf.float32)[:, tf.newaxis]


def fused_entropy(p_a: tf.Tensor, p_b: tf.Tensor, mask_a: tf.Tensor,
                  mask_b: tf.Tensor) -> tf.Tensor:
  """Entropy (nats) of each row's distribution over both patterns' keys.

  Args:
    p_a, p_b: <float>[B, H, N, Ka], [B, H, N, Kb], one softmax over both.
    mask_a, mask_b: [B, N, Ka], [B, N, Kb], 1 for the keys a row sees.

  Returns:
    <float32>[B, H, N] (0 for all-zero rows).
  """
  p_a, p_b = _masked(p_a, mask_a), _masked(p_b, mask_b)
  return -(tf.reduce_sum(tf.math.xlogy(p_a, p_a), -1) +
           tf.reduce_sum(tf.math.xlogy(p_b, p_b), -1))


def fused_jsd(p_a: tf.Tensor, p_b: tf.Tensor, q_a: tf.Tensor, q_b: tf.Tensor,
              mask_a: tf.Tensor, mask_b: tf.Tensor) -> tf.Tensor:
  """Jensen-Shannon divergence (nats) between fused rows P and Q, row by row.

  JSD(P, Q) = KL(P || M) / 2 + KL(Q || M) / 2 with M = (P + Q) / 2.

  Args:
    p_a, p_b: P, <float>[B, H, N, Ka], [B, H, N, Kb].
    q_a, q_b: Q, the same shapes (the same head one layer on).
    mask_a, mask_b: [B, N, Ka], [B, N, Kb].

  Returns:
    <float32>[B, H, N] in [0, ln 2].
  """
  total = 0.0
  for p, q, mask in ((p_a, q_a, mask_a), (p_b, q_b, mask_b)):
    p, q = _masked(p, mask), _masked(q, mask)
    m = 0.5 * (p + q)
    # xlogy(0, .) = 0: keys that one branch never attends add nothing.
    total += tf.reduce_sum(tf.math.xlogy(p, p) - tf.math.xlogy(p, m) +
                           tf.math.xlogy(q, q) - tf.math.xlogy(q, m), -1)
  # Rounding can leave -1e-8 for identical rows; the divergence is >= 0.
  return tf.maximum(0.5 * total, 0.0)


def layer_statistics(probs: Sequence[Mapping[str, tf.Tensor]],
                     side_inputs: Mapping[str, Optional[tf.Tensor]],
                     local_radius: int) -> Dict[str, Dict[str, Any]]:
  """Every row's entropy and adjacent-layer JSD, per branch.

  Args:
    probs: per layer, `EtcModel`'s probability dict (see `key_masks`).
    side_inputs: the side inputs the model ran with.
    local_radius: r.

  Returns:
    branch -> {"keys": <float32>[B, N] (K per row), "entropy": a list (one
    per layer) of [B, H, N], "jsd": a list (one per pair of layers l,
    l + 1) of [B, H, N]}, N = L for "long" and G for "global".
  """
  masks = key_masks(side_inputs, probs[0], local_radius)
  out = {}
  for name, (a, b) in BRANCHES.items():
    mask_a, mask_b = masks[name]
    entropy = [fused_entropy(layer[a], layer[b], mask_a, mask_b)
               for layer in probs]
    jsd = [fused_jsd(lo[a], lo[b], hi[a], hi[b], mask_a, mask_b)
           for lo, hi in zip(probs, probs[1:])]
    out[name] = {"keys": key_counts(mask_a, mask_b), "entropy": entropy,
                 "jsd": jsd}
  return out


# ------------------------------------------------------ NumPy, streaming
def row_inclusion(keys: np.ndarray, padding: np.ndarray
                  ) -> Tuple[np.ndarray, int, int]:
  """Which rows count: (include <bool>[B, N], padding rows, fully masked
  rows).

  Args:
    keys: [B, N], the keys each row sees.
    padding: <bool>[B, N], the row is a padding token (counted as padding
      even when also fully masked).
  """
  padding = np.asarray(padding, bool)
  masked = (np.asarray(keys) <= 0) & ~padding
  include = ~padding & ~masked
  return include, int(padding.sum()), int(masked.sum())


class StreamingSummary:
  """Per (layer, head) histogram of a statistic, plus exact count, sum, min
  and max; a fixed size whatever the number of rows added.

  Quantiles are exact up to one bin width, `upper / bins` (values are binned
  on [0, upper]; values outside fall into the end bins); mean and count are
  exact.
  """

  def __init__(self, num_layers: int, num_heads: int, upper: float,
               bins: int = 2048):
    if bins < 1 or num_layers < 0 or num_heads < 1:
      raise ValueError("need bins >= 1, num_layers >= 0, num_heads >= 1")
    self.upper = max(float(upper), 1e-9)
    self.bins = bins
    self.width = self.upper / bins
    self.counts = np.zeros([num_layers, num_heads, bins], np.int64)
    self.total = np.zeros([num_layers, num_heads], np.int64)
    self.sums = np.zeros([num_layers, num_heads], np.float64)
    self.low = np.full([num_layers, num_heads], np.inf)
    self.high = np.full([num_layers, num_heads], -np.inf)

  @property
  def num_layers(self) -> int:
    return self.counts.shape[0]

  @property
  def num_heads(self) -> int:
    return self.counts.shape[1]

  def nbytes(self) -> int:
    """The state's size (constant)."""
    return sum(a.nbytes for a in (self.counts, self.total, self.sums,
                                  self.low, self.high))

  def add(self, layer: int, values: np.ndarray, include: np.ndarray) -> None:
    """Adds one layer's rows.

    Args:
      layer: the layer (or layer pair) index.
      values: [B, H, N].
      include: <bool>[B, N], the rows that count.
    """
    values = np.asarray(values, np.float64)
    kept = np.moveaxis(values, 1, 0)[:, np.asarray(include, bool)]  # [H, n]
    n = kept.shape[1]
    if not n:
      return
    index = np.clip(np.floor(kept / self.width), 0, self.bins - 1)
    index = index.astype(np.int64) + np.arange(self.num_heads)[:, None] * (
        self.bins)
    self.counts[layer] += np.bincount(
        index.ravel(), minlength=self.num_heads * self.bins).reshape(
            self.num_heads, self.bins)
    self.total[layer] += n
    self.sums[layer] += kept.sum(1)
    self.low[layer] = np.minimum(self.low[layer], kept.min(1))
    self.high[layer] = np.maximum(self.high[layer], kept.max(1))

  def quantile(self, layer: int, head: int, q: float) -> float:
    """The q-quantile (NumPy's linear rule), within one bin width."""
    return histogram_quantile(self.counts[layer, head], self.width, q,
                              self.low[layer, head], self.high[layer, head])

  def summary(self, layer: int, head: int) -> Dict[str, Any]:
    """count, mean, median, q1, q3, min, max (None without rows)."""
    count = int(self.total[layer, head])
    if not count:
      return dict(count=0, mean=None, median=None, q1=None, q3=None,
                  min=None, max=None)
    return dict(count=count,
                mean=float(self.sums[layer, head] / count),
                median=self.quantile(layer, head, 0.5),
                q1=self.quantile(layer, head, 0.25),
                q3=self.quantile(layer, head, 0.75),
                min=float(self.low[layer, head]),
                max=float(self.high[layer, head]))

  def density(self, layer: int, head: int, points: int = 64
              ) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """(coords, density) of a coarser histogram between min and max, for a
    violin; None without rows."""
    count = self.total[layer, head]
    if not count:
      return None
    edges = np.unique(np.linspace(0, self.bins, points + 1).astype(int))
    coarse = np.add.reduceat(self.counts[layer, head], edges[:-1])
    widths = np.diff(edges) * self.width
    centres = (edges[:-1] + np.diff(edges) / 2) * self.width
    density = coarse / (count * widths)
    # A light [1, 2, 1] smoothing: the violin's outline, not its numbers.
    padded = np.pad(density, 1)
    density = (padded[:-2] + 2 * padded[1:-1] + padded[2:]) / 4
    low, high = self.low[layer, head], self.high[layer, head]
    keep = (centres >= low - widths) & (centres <= high + widths)
    coords = np.clip(centres[keep], low, high)
    return coords, density[keep]


def histogram_quantile(counts: np.ndarray, width: float, q: float,
                       low: float = -np.inf, high: float = np.inf) -> float:
  """The q-quantile of values binned with `width` from 0.

  Each order statistic is placed inside its bin (the bin's values spread
  evenly), and the two around rank q (n - 1) are interpolated as
  `np.quantile` does: the result is within one bin width of the exact one.

  Args:
    counts: [bins].
    width: the bin width.
    q: in [0, 1].
    low, high: the exact min and max (estimates are clipped to them).
  """
  counts = np.asarray(counts)
  n = int(counts.sum())
  if not n:
    return float("nan")
  cumulative = np.cumsum(counts)
  rank = q * (n - 1)
  first = int(math.floor(rank))

  def order_statistic(k):
    b = int(np.searchsorted(cumulative, k, side="right"))
    within = k - (cumulative[b] - counts[b])
    return float(np.clip((b + (within + 0.5) / counts[b]) * width, low,
                         high))

  value = order_statistic(first)
  if rank > first:
    value += (rank - first) * (order_statistic(min(first + 1, n - 1)) - value)
  return value


class KeyCountSummary:
  """Exact count, min, max and mean of ln K over the rows that count."""

  def __init__(self):
    self.rows = 0
    self.sum_log = 0.0
    self.min = math.inf
    self.max = 0.0

  def add(self, keys: np.ndarray, include: np.ndarray) -> None:
    kept = np.asarray(keys, np.float64)[np.asarray(include, bool)]
    if kept.size:
      self.rows += kept.size
      self.sum_log += float(np.log(kept).sum())
      self.min = min(self.min, float(kept.min()))
      self.max = max(self.max, float(kept.max()))

  @property
  def mean_log(self) -> float:
    return self.sum_log / self.rows if self.rows else 0.0


class BranchSummary:
  """The streaming state of one query branch: per (layer, head) entropy and
  per (layer pair, head) JSD summaries, the keys per row, the rows left
  out."""

  def __init__(self, name: str, num_layers: int, num_heads: int,
               max_keys: int, bins: int = 2048):
    """Args: name: a key of `BRANCHES`; max_keys: the most keys a row can see
    (the entropy histogram spans [0, ln max_keys])."""
    self.name = name
    self.entropy = StreamingSummary(num_layers, num_heads,
                                    math.log(max_keys), bins)
    self.jsd = StreamingSummary(num_layers - 1, num_heads, math.log(2.0),
                                bins)
    self.keys = KeyCountSummary()
    self.padding_rows = 0
    self.fully_masked_rows = 0

  def add(self, rows: Mapping[str, Any], padding: np.ndarray) -> None:
    """Adds a batch: `rows` is this branch's `layer_statistics` entry as NumPy
    values, `padding` <bool>[B, N] marks padding tokens."""
    include, padded, masked = row_inclusion(rows["keys"], padding)
    self.padding_rows += padded
    self.fully_masked_rows += masked
    self.keys.add(rows["keys"], include)
    for layer, values in enumerate(rows["entropy"]):
      self.entropy.add(layer, values, include)
    for layer, values in enumerate(rows["jsd"]):
      self.jsd.add(layer, values, include)

  def thresholds(self, metric: str) -> Tuple[float, float]:
    """The colour thresholds of "entropy" or "jsd"."""
    if metric == "jsd":
      return JSD_THRESHOLDS
    return entropy_thresholds(self.keys.mean_log)

  def to_json(self) -> Dict[str, Any]:
    keys = self.keys
    return {
        "patterns": list(BRANCHES[self.name]), "rows": keys.rows,
        "padding_rows": self.padding_rows,
        "fully_masked_rows": self.fully_masked_rows,
        "keys": {"min": keys.min if keys.rows else None,
                 "max": keys.max if keys.rows else None,
                 "mean_log": keys.mean_log,
                 "geometric_mean": math.exp(keys.mean_log)},
        "entropy_thresholds": list(self.thresholds("entropy")),
        "entropy_bin_width": self.entropy.width,
        "jsd_bin_width": self.jsd.width,
        "entropy": summaries_json(self.entropy, self.thresholds("entropy")),
        "jsd": summaries_json(self.jsd, self.thresholds("jsd"), pairs=True)}


def entropy_thresholds(mean_log_keys: float) -> Tuple[float, float]:
  """The paper's 1.5 / 4.5 nats (for ln 512) scaled to rows of ln K keys."""
  scale = mean_log_keys / math.log(PAPER_KEYS)
  return tuple(t * scale for t in PAPER_ENTROPY_THRESHOLDS)


def colour_class(median: Optional[float], thresholds: Sequence[float]
                 ) -> Optional[str]:
  """"low", "mid" or "high" (a key of `COLOURS`): the paper's colour of a
  violin by its median (None without rows)."""
  if median is None:
    return None
  if median < thresholds[0]:
    return "low"
  return "high" if median > thresholds[1] else "mid"


def summaries_json(summary: StreamingSummary, thresholds: Sequence[float],
                   pairs: bool = False) -> List[Dict[str, Any]]:
  """Per layer (with `pairs`, per pair of layers l, l + 1), per head: the
  `summary` and colour."""
  out = []
  for layer in range(summary.num_layers):
    heads = [dict(stats, head=head,
                  colour=colour_class(stats["median"], thresholds))
             for head, stats in enumerate(
                 summary.summary(layer, h) for h in range(summary.num_heads))]
    entry = {"layers": [layer, layer + 1]} if pairs else {"layer": layer}
    out.append(dict(entry, heads=heads))
  return out
