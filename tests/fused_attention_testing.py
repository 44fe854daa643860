"""The fused kernels' NumPy reference and random pieces, for the tests, and
the same pieces as the attention core's inputs (TensorFlow)."""

from typing import Dict, Tuple

import numpy as np

# pylint: disable=unused-import
from etc_realformer.kernels.reference import keep_gain
from etc_realformer.kernels.reference import keep_threshold
from etc_realformer.kernels.reference import NEG
from etc_realformer.kernels.reference import relative_error
from etc_realformer.kernels.reference import branch_backward
from etc_realformer.kernels.reference import branch_forward
from etc_realformer.kernels.reference import branch_pieces
from etc_realformer.kernels.reference import BranchCase
from etc_realformer.kernels.reference import source_sums

FIRST_SITE = 34  # a layer's first attention-probability dropout site


def core_seeds(call_seed=(11, 29)) -> np.ndarray:
  """<int32>[4]: the folded dropout seeds of the two patterns' sites
  (FIRST_SITE, + 1) for a call seed, as the core folds them."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from etc_realformer.attention import dropout as dropout_lib  # pylint: disable=g-import-not-at-top
  seed = tf.constant(call_seed, tf.int32)
  return np.concatenate([dropout_lib.fold_seed(seed, FIRST_SITE + i).numpy()
                         for i in range(2)]).astype(np.int32)


def core_branch(case: BranchCase, pieces: Dict[str, np.ndarray],
                call_seed=(11, 29)):
  """(`core.BranchSpec`, `BranchInputs`) of the pieces, in the core's
  layouts (float32 tensors). With dropout, `pieces["seeds"]` must be the
  folded seeds of `call_seed` (`core_seeds`), as the core folds them."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from etc_realformer.attention import core  # pylint: disable=g-import-not-at-top
  from etc_realformer.attention import dropout as dropout_lib  # pylint: disable=g-import-not-at-top
  from etc_realformer.attention.pieces import PatternPair, ScoreInputs, BranchInputs, BranchMasks  # pylint: disable=g-import-not-at-top,line-too-long

  patterns = ("l2l", "l2g") if case.band else ("g2g", "g2l")
  spec = core.BranchSpec(
      patterns=patterns, band=case.band, block_len=case.block_len,
      streams=core.StreamSpec(
          carried=tuple(p for p, c in zip(patterns, case.carried) if c),
          num_summed=case.num_summed, running_mean=case.running_mean,
          emit=case.emit),
      dropout=core.ProbsDropout(rate=case.dropout_rate,
                                training=case.dropout_rate > 0,
                                first_site=FIRST_SITE, by_rows=case.by_rows,
                                rng=dropout_lib.HASH))
  seed = None
  if case.dropout_rate > 0:
    seed = tf.constant(call_seed, tf.int32)
    if not np.array_equal(pieces["seeds"], core_seeds(call_seed)):
      raise ValueError("the pieces' seeds are not the core's: "
                       "pieces['seeds'] = core_seeds(call_seed) first")
  t = {k: tf.constant(v) for k, v in pieces.items()}
  b = case.block_len

  def blocks(x, axis):  # rows -> [.., nb, b, ..] on the band branch
    if not case.band:
      return x
    shape = x.shape.as_list()
    return tf.reshape(x, shape[:axis] + [shape[axis] // b, b] +
                      shape[axis + 1:])

  def mask(x):  # [B, N, C] -> [B, 1, (nb, b | N), C]
    return blocks(x[:, None], 2)

  ids = None
  if case.has_ids:
    ids = PatternPair(blocks(t["ids1"], 1), blocks(t["ids2"], 1))
  sums = PatternPair(*(blocks(t[f"prev{i + 1}"], 2) if case.reads_prev[i]
                       else None for i in range(2)))
  x = BranchInputs(
      scores=ScoreInputs(blocks(t["q"], 2),
                         PatternPair(blocks(t["k1"], 2), t["k2"]),
                         blocks(t["per_id"], 1) if case.has_ids else None),
      values=PatternPair(blocks(t["v1"], 2), t["v2"]),
      masks=BranchMasks(adders=PatternPair(mask(t["add1"]), mask(t["add2"])),
                        valid=blocks(t["valid"][:, None, :, None], 2),
                        ids=ids if ids is not None else PatternPair()),
      sums=sums, seed=seed)
  return spec, x


def rows_of(x, case: BranchCase) -> np.ndarray:
  """A core output in the blocked layout [B, H, nb, b, ...] -> rows."""
  x = np.asarray(x)
  if not case.band:
    return x
  return x.reshape(x.shape[:2] + (x.shape[2] * x.shape[3],) + x.shape[4:])


def core_forward(case: BranchCase, pieces: Dict[str, np.ndarray]
                 ) -> Tuple[np.ndarray, Tuple]:
  """The XLA path's (`core.attend_branch`) context and new sums of
  the pieces, in rows."""
  from etc_realformer.attention import core  # pylint: disable=g-import-not-at-top
  spec, x = core_branch(case, pieces)
  n = case.num_blocks if case.band else case.rows
  out = core.attend_branch(spec, 0, n, x)
  sums = tuple(None if s is None else rows_of(s.numpy(), case)
               for s in out.sums)
  return rows_of(out.ctx.numpy(), case), sums


def core_gradients(case: BranchCase, pieces: Dict[str, np.ndarray],
                   dctx: np.ndarray, dnew) -> Dict[str, np.ndarray]:
  """The XLA path's gradients (TensorFlow's autodiff of
  `core.attend_branch`) of the pieces' q, k1, v1, k2, v2, per_id
  and read sums, in rows, given the gradients of the context and the
  emitted sums (rows)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from etc_realformer.attention import core  # pylint: disable=g-import-not-at-top
  spec, x = core_branch(case, pieces)
  n = case.num_blocks if case.band else case.rows
  leaves = {"q": x.scores.q, "k1": x.scores.keys.first,
            "k2": x.scores.keys.second, "v1": x.values.first,
            "v2": x.values.second}
  if case.has_ids:
    leaves["per_id"] = x.scores.per_id
  for i, s in enumerate(x.sums):
    if s is not None:
      leaves[f"prev{i + 1}"] = s
  with tf.GradientTape() as tape:
    tape.watch(list(leaves.values()))
    out = core.attend_branch(spec, 0, n, x)
  targets = [out.ctx] + [s for s in out.sums if s is not None]
  upstream = [tf.reshape(tf.constant(dctx, tf.float32), out.ctx.shape)]
  upstream += [tf.reshape(tf.constant(g, tf.float32), s.shape)
               for s, g in zip(out.sums, dnew) if s is not None]
  grads = tape.gradient(targets, list(leaves.values()),
                        output_gradients=upstream)
  out = {}
  for (name, leaf), g in zip(leaves.items(), grads):
    g = np.zeros(leaf.shape, np.float32) if g is None else g.numpy()
    if case.band and name in ("q", "k1", "v1", "prev1", "prev2"):
      g = rows_of(g, case)
    elif case.band and name == "per_id":
      g = g.reshape((g.shape[0], -1) + g.shape[3:])
    out[name] = g
  return out
