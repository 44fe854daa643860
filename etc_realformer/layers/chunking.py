"""Computing a function of many rows chunk by chunk, forward and backward.

`chunked_recompute` runs `fn(start, size, pieces)` over chunks of rows and,
in the backward pass, recomputes and differentiates one chunk at a time, so
that at most one chunk's intermediate tensors exist at any time. The
attention layer uses it for its chunked and recomputed strategies
(`etc_realformer.layers.attention`); nothing here knows about attention.
"""

from typing import Callable, Dict, List, Mapping, NamedTuple, Sequence, Tuple

import tensorflow as tf
# XLA's optimization barrier has no public TensorFlow wrapper (not in
# tf.raw_ops); tf2xla's Python module is where TensorFlow itself exposes it.
from tensorflow.compiler.tf2xla.python import xla as tf2xla

from etc_realformer.layers import blocking
from etc_realformer.layers.xla_context import in_xla_context


class ChunkInput(NamedTuple):
  """How one input of a chunked computation is cut.

  kind:
    'rows': disjoint pieces along `axis` (chunk `[start, start + size)`);
    'halo': the chunk's rows plus `halo` more on each side (the input is
      already padded by `halo` at both ends); gradients overlap and add;
    'shared': every chunk sees the whole tensor; gradients add.
  """
  value: tf.Tensor
  kind: str = "rows"
  axis: int = 2
  halo: int = 0


def _take(spec: ChunkInput, x: tf.Tensor, start: int, size: int) -> tf.Tensor:
  if spec.kind == "shared":
    # A tensor of its own, so that an input given under two names gets each
    # name's gradient once.
    return tf.identity(x)
  if spec.kind == "rows":
    return blocking.slice_last(x, start, size, spec.axis)
  return blocking.slice_last(x, start, size + 2 * spec.halo, spec.axis)


class ChunkedPart(NamedTuple):
  """One computation for `chunked_recompute`.

  `fn(start, size, pieces)` computes the outputs of rows
  `[start, start + size)` from the pieces of `inputs` and `consts` (see
  `ChunkInput`; `consts` get no gradient); each output is concatenated over
  `chunks` along `out_axes[name]`. `fn` must be a pure function of its
  pieces (no variables, no captured tensors that depend on the chunk; seeded
  randomness only).
  """
  fn: Callable[[int, int, Dict[str, tf.Tensor]], Dict[str, tf.Tensor]]
  inputs: Mapping[str, ChunkInput]
  chunks: List[Tuple[int, int]]
  out_axes: Mapping[str, int]
  consts: Mapping[str, ChunkInput] = {}


def chunked_recompute(parts: Sequence[ChunkedPart]
                      ) -> List[Dict[str, tf.Tensor]]:
  """Runs each part chunk by chunk; the backward pass recomputes one chunk at
  a time.

  Only the parts' inputs are kept for the backward pass. There each chunk's
  forward is recomputed under a tape and differentiated alone, the chunks
  (of all parts, part after part) one after the other, so at most one
  chunk's intermediate tensors (scores, probabilities, masks, their
  gradients) are alive at any time, in the forward pass as in the backward
  pass. The cost is one more forward pass of every `fn`. The parts share one
  custom gradient so that they are sequenced too: with one each, a part
  whose upstream gradient arrives early (the global side's) runs beside
  whatever else the backward pass is doing, and the working sets add up.

  The order is forced by gating every chunk's pieces (identities with control
  inputs on the previous chunk's results): a control input on anything
  else, e.g. the constants of a slice, may be folded away by the graph
  optimizers, and then the executor runs all chunks at once.

  Under XLA (`jit_compile`) control inputs do not stop common-subexpression
  elimination: the recomputed forward is the same expression of the same
  tensors as the original one, so XLA merges the two and keeps the
  original's intermediates for the backward pass, and recomputation saves
  nothing. There the backward pass reads its inputs, constants and upstream
  gradients through one optimization barrier, as JAX's `remat` does: the
  recomputation is then a new expression that XLA cannot merge, and it
  cannot start before every upstream gradient exists.

  Returns:
    per part, dict name -> the concatenated output.
  """
  parts = list(parts)
  names = [sorted(part.inputs) for part in parts]
  specs = [[part.inputs[n] for n in ns] for part, ns in zip(parts, names)]
  const_names = [sorted(part.consts) for part in parts]
  const_values = [[part.consts[n].value for n in ns]
                  for part, ns in zip(parts, const_names)]
  bounds = [0]
  for ns in names:
    bounds.append(bounds[-1] + len(ns))
  out_names: List[List[str]] = [[] for _ in parts]

  def cut(i: int, k: int, values, consts, deps) -> Dict[str, tf.Tensor]:
    start, size = parts[i].chunks[k]
    pieces = {}
    with tf.control_dependencies(deps):
      for n, spec, v in zip(names[i], specs[i], values):
        pieces[n] = _take(spec, tf.identity(v), start, size)
      for n, v in zip(const_names[i], consts):
        pieces[n] = tf.stop_gradient(
            _take(parts[i].consts[n], tf.identity(v), start, size))
    return pieces

  def part_grads(i: int, values, dys: Dict[str, tf.Tensor], deps,
                 consts):
    """Gradients of part i's inputs, chunk after chunk (after `deps`)."""
    part = parts[i]
    rows = {n: [] for n, spec in zip(names[i], specs[i])
            if spec.kind == "rows"}
    sums: Dict[str, tf.Tensor] = {}
    for k, (start, size) in enumerate(part.chunks):
      pieces = cut(i, k, values, consts, deps)
      piece_list = [pieces[n] for n in names[i]]
      with tf.GradientTape() as tape:
        tape.watch(piece_list)
        out = part.fn(start, size, pieces)
      targets, out_grads = [], []
      with tf.control_dependencies(deps):
        for n in out_names[i]:
          if dys[n] is None:
            continue
          targets.append(out[n])
          out_grads.append(blocking.slice_last(
              tf.identity(dys[n]), start, size, part.out_axes[n]))
      grads = tape.gradient(
          targets, piece_list, output_gradients=out_grads,
          unconnected_gradients=tf.UnconnectedGradients.ZERO)
      deps = []
      for n, spec, v, g in zip(names[i], specs[i], values, grads):
        if spec.kind == "rows":
          rows[n].append(g)
          deps.append(g)
          continue
        g = tf.cast(g, tf.float32)
        if spec.kind == "halo":
          paddings = [[0, 0]] * v.shape.rank
          total = blocking.dim(v, spec.axis)
          paddings[spec.axis] = [start, total - start - size - 2 * spec.halo]
          g = tf.pad(g, paddings)
        sums[n] = g if n not in sums else sums[n] + g
        deps.append(sums[n])
    out = []
    for n, spec, v in zip(names[i], specs[i], values):
      if spec.kind == "rows":
        p = rows[n]
        out.append(p[0] if len(p) == 1 else tf.concat(p, axis=spec.axis))
      else:
        out.append(tf.cast(sums[n], v.dtype))
    return out

  @tf.custom_gradient
  @tf.autograph.experimental.do_not_convert  # as EtcModel.call
  def run(*flat):
    values = [flat[bounds[i]:bounds[i + 1]] for i in range(len(parts))]
    result, deps = [], []
    for i, part in enumerate(parts):
      outs = []
      for k in range(len(part.chunks)):
        pieces = cut(i, k, values[i], const_values[i], deps)
        out = part.fn(*part.chunks[k], pieces)
        outs.append(out)
        deps = list(out.values())
      out_names[i][:] = sorted(outs[0])
      result.extend(outs[0][n] if len(outs) == 1 else
                    tf.concat([o[n] for o in outs], axis=part.out_axes[n])
                    for n in out_names[i])

    @tf.autograph.experimental.do_not_convert  # traced in the backward pass
    def grad(*dys):
      # The recomputation must wait for the upstream gradients, all of them
      # (else it is merged with the forward pass, runs all chunks at once,
      # or runs beside the rest of the backward pass).
      deps = [d for d in dys if d is not None]
      flat_values = [v for vs in values for v in vs]
      flat_consts = [c for cs in const_values for c in cs]
      dys = list(dys)
      if in_xla_context():
        live = [k for k, d in enumerate(dys) if d is not None]
        barred = list(tf2xla.optimization_barrier(
            *flat_values, *flat_consts, *[dys[k] for k in live]))
        flat_values = barred[:len(flat_values)]
        flat_consts = barred[len(flat_values):
                             len(flat_values) + len(flat_consts)]
        for k, d in zip(live, barred[len(flat_values) + len(flat_consts):]):
          dys[k] = d
        deps = []  # The barrier orders the recomputation already.
      out, at, c_at = [], 0, 0
      for i in range(len(parts)):
        part_dys = dict(zip(out_names[i], dys[at:at + len(out_names[i])]))
        at += len(out_names[i])
        part_values = flat_values[bounds[i]:bounds[i + 1]]
        part_consts = flat_consts[c_at:c_at + len(const_values[i])]
        c_at += len(const_values[i])
        grads = part_grads(i, part_values, part_dys, deps, part_consts)
        out.extend(grads)
        deps = grads
      return out

    return result, grad

  flat_result = run(*[spec.value for part_specs in specs
                      for spec in part_specs])
  results, at = [], 0
  for ns in out_names:
    results.append(dict(zip(ns, flat_result[at:at + len(ns)])))
    at += len(ns)
  return results


def chunk_bounds(total: int, num_chunks: int) -> List[Tuple[int, int]]:
  """(start, size) of `num_chunks` (or fewer) near-equal pieces of `total`."""
  size = -(-total // max(1, num_chunks))
  return [(s, min(size, total - s)) for s in range(0, total, size)]
