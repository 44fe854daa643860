"""`chunked_recompute`: the same values and gradients as the function
computed whole, in chunks or not, eagerly, in a graph and under XLA, where
the recomputed forward must stay a computation of its own."""

import re

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.attention.chunking import (ChunkedPart, ChunkInput,
                                            chunk_bounds, chunked_recompute)


def _rows_fn(start, size, x):
  del start, size
  return {"y": tf.exp(x["a"]) * x["w"]}


def _inputs():
  rng = np.random.RandomState(0)
  a = tf.constant(rng.normal(size=[2, 3, 7, 5]).astype(np.float32))
  w = tf.constant(rng.normal(size=[5]).astype(np.float32))
  probe = tf.constant(rng.normal(size=[2, 3, 7, 5]).astype(np.float32))
  return a, w, probe


def _loss_and_grads(a, w, probe, num_chunks):
  with tf.GradientTape() as tape:
    tape.watch([a, w])
    if num_chunks:
      part = ChunkedPart(_rows_fn, {"a": ChunkInput(a, "rows", axis=2),
                                    "w": ChunkInput(w, "shared")},
                         chunk_bounds(7, num_chunks), {"y": 2})
      y = chunked_recompute([part])[0]["y"]
    else:
      y = _rows_fn(0, 7, {"a": a, "w": w})["y"]
    loss = tf.reduce_sum(y * probe)
  return [loss] + tape.gradient(loss, [a, w])


def test_chunk_bounds():
  assert chunk_bounds(7, 3) == [(0, 3), (3, 3), (6, 1)]
  assert chunk_bounds(4, 1) == [(0, 4)]
  assert chunk_bounds(2, 5) == [(0, 1), (1, 1)]


@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
@pytest.mark.parametrize("num_chunks", [1, 3])
def test_same_loss_and_gradients_as_whole(mode, num_chunks):
  a, w, probe = _inputs()
  fn = _loss_and_grads
  if mode != "eager":
    fn = tf.function(fn, jit_compile=mode == "xla")
  expected = _loss_and_grads(a, w, probe, 0)
  got = fn(a, w, probe, num_chunks)
  for e, g in zip(expected, got):
    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5,
                               atol=1e-5 * float(np.abs(e).max()))


def _exponentials(num_chunks):
  a, w, probe = _inputs()
  fn = tf.function(_loss_and_grads, jit_compile=True)
  hlo = fn.experimental_get_compiler_ir(a, w, probe, num_chunks)(
      stage="optimized_hlo")
  return len(re.findall(r"\bexponential\(", hlo))


def test_xla_recomputes_instead_of_keeping_the_forward():
  # Whole, autodiff keeps exp(a) for the backward pass: one exponential.
  # Recomputed, the backward pass reads its inputs through an optimization
  # barrier, so XLA cannot merge the recomputed exp(a) with the forward one
  # (without the barrier it did, and recomputation saved nothing).
  assert _exponentials(0) == 1
  assert _exponentials(1) == 2


def test_nested_pieces_constants_and_outputs():
  # Any tf.nest structure of ChunkInputs; a constant input is cut like the
  # others but gets no gradient; the outputs keep fn's structure.
  a, w, probe = _inputs()
  mask = tf.constant(np.random.RandomState(1).rand(2, 3, 7, 5) > 0.5,
                     tf.float32)

  def fn(start, size, x):
    del start, size
    y = tf.exp(x["a"]) * x["more"][0] * x["more"][1]
    return y, {"half": 0.5 * y}

  def loss_and_grads(num_chunks):
    with tf.GradientTape() as tape:
      tape.watch([a, w, mask])
      if num_chunks:
        inputs = {"a": ChunkInput(a),
                  "more": (ChunkInput(w, "shared"),
                           ChunkInput(mask, constant=True))}
        y, extra = chunked_recompute([ChunkedPart(
            fn, inputs, chunk_bounds(7, num_chunks), 2)])[0]
      else:
        y, extra = fn(0, 7, {"a": a, "more": (w, mask)})
      loss = tf.reduce_sum(y * probe) + tf.reduce_sum(extra["half"])
    return [loss] + tape.gradient(loss, [a, w, mask])

  expected = loss_and_grads(0)
  got = loss_and_grads(3)
  assert got[3] is None  # The constant.
  for e, g in zip(expected[:3], got[:3]):
    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5,
                               atol=1e-5 * float(np.abs(e).max()))
