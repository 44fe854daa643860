"""Computing a function of many rows chunk by chunk, forward and backward.

`chunked_recompute` runs `fn(start, size, pieces)` over chunks of rows and,
in the backward pass, recomputes and differentiates one chunk at a time, so
that at most one chunk's intermediate tensors exist at any time. The
attention layer uses it for its chunked and recomputed strategies
(`etc_realformer.attention.layer`); nothing here knows about attention.

The pieces are any `tf.nest` structure (a dict, the attention core's typed
`pieces.BranchInputs`) whose leaves say how each piece is cut
(`ChunkInput`); `fn` gets the same structure with each leaf's tensor cut to
the chunk, and returns any structure of tensors.
"""

import dataclasses
from typing import Any, Callable, List, NamedTuple, Sequence, Tuple, Union

import tensorflow as tf
# XLA's optimization barrier has no public TensorFlow wrapper (not in
# tf.raw_ops); tf2xla's Python module is where TensorFlow itself exposes it.
from tensorflow.compiler.tf2xla.python import xla as tf2xla

from etc_realformer.attention import blocking
from etc_realformer.layers.xla_context import in_xla_context


@dataclasses.dataclass(frozen=True, eq=False)
class ChunkInput:
  """How one input of a chunked computation is cut (a `tf.nest` leaf).

  kind:
    'rows': disjoint pieces along `axis` (chunk `[start, start + size)`);
    'halo': the chunk's rows plus `halo` more at each end (the input is
      already padded by `halo` at both ends); gradients overlap and add;
    'shared': every chunk sees the whole tensor; gradients add.
  constant: the input gets no gradient (masks, ids, seeds).

  A dataclass, not a NamedTuple: tf.nest would flatten a NamedTuple into its
  fields, and a structure of `ChunkInput`s must have them as its leaves.
  """
  value: tf.Tensor
  kind: str = "rows"
  axis: int = 2
  halo: int = 0
  constant: bool = False


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
  `[start, start + size)` from `pieces`: `inputs` (a nest of `ChunkInput`)
  with each leaf cut to the chunk. Each output leaf is concatenated over
  `chunks` along `out_axes`: one axis for every output, or a nest of axes
  of the outputs' structure. `fn` must be a pure function of its pieces (no
  variables, no captured tensors that depend on the chunk; seeded
  randomness only), and return the same structure for every chunk.
  """
  fn: Callable[[int, int, Any], Any]
  inputs: Any
  chunks: List[Tuple[int, int]]
  out_axes: Union[int, Any]


def _out_axes(part: ChunkedPart, num_outputs: int) -> List[int]:
  if isinstance(part.out_axes, int):
    return [part.out_axes] * num_outputs
  axes = tf.nest.flatten(part.out_axes)
  if len(axes) != num_outputs:
    raise ValueError(f"out_axes {part.out_axes!r} do not match the "
                     f"{num_outputs} outputs")
  return axes


def chunked_recompute(parts: Sequence[ChunkedPart]) -> List[Any]:
  """Runs each part chunk by chunk; the backward pass recomputes one chunk at
  a time.

  Only the parts' inputs are kept for the backward pass. There each chunk's
  forward is recomputed under a tape and differentiated alone, the chunks
  (of all parts, part after part) one after the other, so at most one
  chunk's intermediate tensors (scores, probabilities, masks, their
  gradients) are alive at any time, in the forward pass as in the backward
  pass. The cost is one more forward pass of every `fn`. The parts share one
  custom gradient so that they are sequenced too: with one each, a part
  whose upstream gradient arrives early (the global branch's) runs beside
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
    per part, the outputs' structure with each leaf concatenated.
  """
  chunked = _ChunkedParts(parts)

  @tf.custom_gradient
  @tf.autograph.experimental.do_not_convert  # as EtcModel.call
  def run(*flat):
    values = chunked.per_part(flat)

    @tf.autograph.experimental.do_not_convert  # traced in the backward pass
    def grad(*dys):
      return chunked.backward(values, dys)

    return chunked.forward(values), grad

  return chunked.unflatten(run(*chunked.differentiated_values()))


class _ChunkedParts:
  """`chunked_recompute`'s parts, flattened, and their two passes.

  Per part, the inputs' leaves in `tf.nest` order split into the
  differentiated ones (the custom gradient's arguments, `specs`) and the
  constants (captured, `const_values`).
  """

  def __init__(self, parts: Sequence[ChunkedPart]):
    self.parts = list(parts)
    self.leaves = [tf.nest.flatten(part.inputs) for part in self.parts]
    self.specs = [[c for c in ls if not c.constant] for ls in self.leaves]
    self.const_values = [[c.value for c in ls if c.constant]
                         for ls in self.leaves]
    self.bounds = [0]
    for specs in self.specs:
      self.bounds.append(self.bounds[-1] + len(specs))
    # Per part, fn's output structure (set by the forward pass).
    self.out_structures: List[Any] = [None] * len(self.parts)

  def differentiated_values(self) -> List[tf.Tensor]:
    return [spec.value for specs in self.specs for spec in specs]

  def per_part(self, flat: Sequence[tf.Tensor]) -> List[Sequence[tf.Tensor]]:
    return [flat[self.bounds[i]:self.bounds[i + 1]]
            for i in range(len(self.parts))]

  def num_outputs(self, i: int) -> int:
    return len(tf.nest.flatten(self.out_structures[i]))

  def unflatten(self, flat_result: Sequence[tf.Tensor]) -> List[Any]:
    results, at = [], 0
    for i, structure in enumerate(self.out_structures):
      n = self.num_outputs(i)
      results.append(tf.nest.pack_sequence_as(structure,
                                              list(flat_result[at:at + n])))
      at += n
    return results

  def cut(self, i: int, k: int, values, consts, deps
          ) -> Tuple[Any, List[tf.Tensor]]:
    """Part i's pieces of chunk k (after `deps`), and its differentiated
    pieces in order."""
    start, size = self.parts[i].chunks[k]
    values, consts = iter(values), iter(consts)
    pieces, watched = [], []
    with tf.control_dependencies(deps):
      for spec in self.leaves[i]:
        if spec.constant:
          pieces.append(tf.stop_gradient(
              _take(spec, tf.identity(next(consts)), start, size)))
        else:
          pieces.append(_take(spec, tf.identity(next(values)), start, size))
          watched.append(pieces[-1])
    return tf.nest.pack_sequence_as(self.parts[i].inputs, pieces), watched

  def forward(self, values: List[Sequence[tf.Tensor]]) -> List[tf.Tensor]:
    """Every part's outputs, flat, chunk after chunk."""
    result, deps = [], []
    for i, part in enumerate(self.parts):
      outs = []
      for k in range(len(part.chunks)):
        pieces, _ = self.cut(i, k, values[i], self.const_values[i], deps)
        out = part.fn(*part.chunks[k], pieces)
        outs.append(tf.nest.flatten(out))
        deps = outs[-1]
      self.out_structures[i] = out
      axes = _out_axes(part, len(outs[0]))
      result.extend(ys[0] if len(ys) == 1 else tf.concat(ys, axis=axis)
                    for ys, axis in zip(zip(*outs), axes))
    return result

  def backward(self, values: List[Sequence[tf.Tensor]], dys: Sequence[Any]
               ) -> List[tf.Tensor]:
    """The gradients of every part's differentiated inputs, flat."""
    # The recomputation must wait for the upstream gradients, all of them
    # (else it is merged with the forward pass, runs all chunks at once,
    # or runs beside the rest of the backward pass).
    deps = [d for d in dys if d is not None]
    flat_values = [v for vs in values for v in vs]
    flat_consts = [c for cs in self.const_values for c in cs]
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
    for i in range(len(self.parts)):
      part_dys = dys[at:at + self.num_outputs(i)]
      at += self.num_outputs(i)
      part_values = flat_values[self.bounds[i]:self.bounds[i + 1]]
      part_consts = flat_consts[c_at:c_at + len(self.const_values[i])]
      c_at += len(self.const_values[i])
      grads = self.part_grads(i, part_values, part_dys, deps, part_consts)
      out.extend(grads)
      deps = grads
    return out

  def part_grads(self, i: int, values, dys: List[Any], deps, consts
                 ) -> List[tf.Tensor]:
    """Gradients of part i's inputs, chunk after chunk (after `deps`)."""
    part, specs = self.parts[i], self.specs[i]
    axes = _out_axes(part, len(dys))
    rows = {n: [] for n, spec in enumerate(specs) if spec.kind == "rows"}
    sums = {}
    for k, (start, size) in enumerate(part.chunks):
      pieces, piece_list = self.cut(i, k, values, consts, deps)
      with tf.GradientTape() as tape:
        tape.watch(piece_list)
        out = tf.nest.flatten(part.fn(start, size, pieces))
      targets, out_grads = [], []
      with tf.control_dependencies(deps):
        for y, dy, axis in zip(out, dys, axes):
          if dy is None:
            continue
          targets.append(y)
          out_grads.append(blocking.slice_last(tf.identity(dy), start, size,
                                               axis))
      grads = tape.gradient(
          targets, piece_list, output_gradients=out_grads,
          unconnected_gradients=tf.UnconnectedGradients.ZERO)
      deps = []
      for n, (spec, v, g) in enumerate(zip(specs, values, grads)):
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
    for n, (spec, v) in enumerate(zip(specs, values)):
      if spec.kind == "rows":
        p = rows[n]
        out.append(p[0] if len(p) == 1 else tf.concat(p, axis=spec.axis))
      else:
        out.append(tf.cast(sums[n], v.dtype))
    return out


def chunk_bounds(total: int, num_chunks: int) -> List[Tuple[int, int]]:
  """(start, size) of `num_chunks` (or fewer) near-equal pieces of `total`."""
  size = -(-total // max(1, num_chunks))
  return [(s, min(size, total - s)) for s in range(0, total, size)]
