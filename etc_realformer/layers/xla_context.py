"""Whether the graph being built is traced for XLA.

Some ops are written one way for TensorFlow's kernels and another for XLA,
whose fusion changes what is cheap (`chunking.chunked_recompute`,
`relative_table.relative_scores`, `attention.plan_attention`).
"""

import tensorflow as tf
# TF's own test for "being traced for XLA" (its control flow and Keras use
# it); there is no public one.
from tensorflow.python.ops import control_flow_util  # pylint: disable=g-direct-tensorflow-import


def in_xla_context() -> bool:
  """Whether the op being built is traced for XLA (`jit_compile=True`)."""
  return control_flow_util.GraphOrParentsInXlaContext(
      tf.compat.v1.get_default_graph())
