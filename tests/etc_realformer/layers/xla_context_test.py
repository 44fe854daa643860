"""Whether a graph is traced for XLA
(`etc_realformer/layers/xla_context.py`)."""

import tensorflow as tf

from etc_realformer.layers.xla_context import in_xla_context


def _traced(jit_compile, inner=None):
  """Whether `in_xla_context` held while tracing a function."""
  seen = []

  def body(x):
    seen.append(in_xla_context())
    return x + 1

  fn = inner(body) if inner else body
  tf.function(fn, jit_compile=jit_compile)(tf.constant(1.0))
  return seen


def test_eager_and_plain_graphs_are_not_xla():
  assert not in_xla_context()
  assert _traced(jit_compile=None) == [False]
  assert _traced(jit_compile=False) == [False]


def test_jit_compiled_functions_are_xla():
  assert _traced(jit_compile=True) == [True]


def test_a_function_called_inside_a_jit_compiled_one_is_xla():
  # The inner tf.function is inlined into the XLA cluster: the ops it
  # builds are traced for XLA although it has no jit_compile of its own.
  assert _traced(jit_compile=True, inner=tf.function) == [True]
  # And back outside, nothing is left over.
  assert not in_xla_context()
