"""The matrix products of a traced TensorFlow step, with their FLOPs.

`tools.bench.benchmark --mode=matmul_floor` times these products alone (each op
on random inputs of its shapes): the time no encoder doing the same products can
go below on a machine.
"""

from typing import Any, Dict, List, Tuple

_PRODUCT_OPS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")


def matrix_products(graph) -> Tuple[List[Dict[str, Any]], Dict[str, int]]:
  """The matrix products of a traced step, with their static shapes.

  Returns:
    (products: one dict per MatMul / BatchMatMul op with `a`, `b` (shapes),
     `transpose_a`, `transpose_b`, `dtype`, `gflop`, `name`;
     skipped: op type -> count of ops not timed: einsums (contractions of
     another form) and calls into nested functions, whose products this walk
     does not see. Leaving them out keeps the floor a lower bound.)
  """
  # FLOPs counted here rather than by TensorFlow's registry
  # (`ops.get_stats_for_node_def(..., "flops")`, profiler/internal): it
  # reads BatchMatMul's `transpose_a`, an attribute the op does not have
  # (`adj_x`), so it miscounts the backward pass's adjoint products (180
  # against 240 FLOPs for [2, 4, 3]^T x [2, 4, 5]).
  import numpy as np  # pylint: disable=g-import-not-at-top
  products, skipped = [], {}
  for op in graph.get_operations():
    if op.type == "Einsum" or (op.type in _CALL_OPS and
                               _may_hold_products(graph, op)):
      skipped[op.type] = skipped.get(op.type, 0) + 1
      continue
    if op.type not in _PRODUCT_OPS:
      continue
    a, b = op.inputs[0].shape, op.inputs[1].shape
    if not (a.is_fully_defined() and b.is_fully_defined()):
      raise ValueError(f"matrix product {op.name} has a dynamic shape: "
                       f"{a} x {b}")
    if op.type == "MatMul":
      ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
    else:
      ta, tb = op.get_attr("adj_x"), op.get_attr("adj_y")
    a, b = a.as_list(), b.as_list()
    m, k = (a[-1], a[-2]) if ta else (a[-2], a[-1])
    n = b[-2] if tb else b[-1]
    batch = int(np.prod(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])),
                        dtype=np.int64))
    products.append({"a": a, "b": b, "transpose_a": bool(ta),
                     "transpose_b": bool(tb),
                     "dtype": op.inputs[0].dtype.name, "name": op.name,
                     "gflop": 2.0 * batch * m * n * k / 1e9})
  return products, skipped


def _may_hold_products(graph, op) -> bool:
  """Whether a call op's function (or what it calls) may do matrix products
  (e.g. the gelu's XLA-compiled gradient does not); True when unknown."""
  try:
    fdef = graph._get_function(op.get_attr("f").name).definition  # pylint: disable=protected-access
  except (AttributeError, ValueError, KeyError, TypeError):
    return True
  types = {node.op for node in fdef.node_def}
  return bool(types & (set(_PRODUCT_OPS) | set(_CALL_OPS) | {"Einsum"}))
