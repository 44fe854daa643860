"""The op types an exported SavedModel holds, per signature, and which of
them are not core TensorFlow ops.

A server needs every op a SavedModel's graph uses to be registered (linked
in, or loaded as a custom-op library). `signature_op_types` lists them per
signature: the op types of the nodes a signature's outputs depend on and of
every function those nodes call (the model's `StatefulPartitionedCall`s,
`tf.map_fn`'s `While` bodies, ...), transitively; `all_op_types`, those of
the whole file, which is what loading needs (`tf.saved_model.load` imports
every function of the library, whichever signature is called later);
`function_op_types`, those of a traced signature before it is saved.
`not_in_core` picks the ones core TensorFlow lacks
(`etc_realformer/export/README.md` lists them per task):

  from etc_realformer.export import ops
  ops.not_in_core(ops.all_op_types("EXPORT_DIR/<version>"))
"""

import os
from typing import Dict, FrozenSet, Iterable, Iterator, List, Set

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

# Not a signature: the SavedModel's initialization op.
_INIT_OP = "__saved_model_init_op"


def _meta_graph(saved_model_dir: str):
  saved = saved_model_pb2.SavedModel()
  with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
    saved.ParseFromString(f.read())
  (meta,) = saved.meta_graphs
  return meta


def _called_functions(attrs) -> Iterator[str]:
  """Names of the functions that a node's attributes refer to (`f` of a
  call, `body` / `cond` of a loop, `then_branch` of a conditional, ...)."""
  for value in attrs.values():
    if value.HasField("func"):
      yield value.func.name
    elif value.HasField("list"):
      for func in value.list.func:
        yield func.name


def _node_name(tensor_name: str) -> str:
  """"^node", "node:1", "node:out:0" -> "node"."""
  return tensor_name.lstrip("^").split(":", 1)[0]


def _op_types(nodes: Iterable, functions: Dict[str, object]) -> Set[str]:
  """The op types of `nodes` and of the functions they call, transitively."""
  ops: Set[str] = set()
  pending: List[str] = []
  seen: Set[str] = set()

  def visit(node_list):
    for node in node_list:
      ops.add(node.op)
      if node.op in functions:  # A call of a library function by name.
        pending.append(node.op)
      pending.extend(_called_functions(node.attr))

  visit(nodes)
  while pending:
    name = pending.pop()
    if name in seen or name not in functions:
      continue
    seen.add(name)
    visit(functions[name].node_def)
  return {op for op in ops if op not in functions}


def signature_op_types(saved_model_dir: str) -> Dict[str, FrozenSet[str]]:
  """Signature name -> the op types its outputs need (see the module
  docstring)."""
  meta = _meta_graph(saved_model_dir)
  graph = meta.graph_def
  functions = {f.signature.name: f for f in graph.library.function}
  by_name = {node.name: node for node in graph.node}
  out = {}
  for name, signature in meta.signature_def.items():
    if name == _INIT_OP:
      continue
    # The graph nodes the outputs depend on.
    pending = [_node_name(t.name) for t in signature.outputs.values()]
    reached = {}
    while pending:
      node = by_name.get(pending.pop())
      if node is None or node.name in reached:
        continue
      reached[node.name] = node
      pending.extend(_node_name(i) for i in node.input)
    out[name] = frozenset(_op_types(reached.values(), functions))
  return out


def all_op_types(saved_model_dir: str) -> FrozenSet[str]:
  """Every op type of the SavedModel: its graph's and its functions'."""
  graph = _meta_graph(saved_model_dir).graph_def
  functions = {f.signature.name: f for f in graph.library.function}
  ops = {node.op for node in graph.node}
  for function in functions.values():
    ops.update(node.op for node in function.node_def)
  return frozenset(op for op in ops if op not in functions)


def function_op_types(concrete_function) -> FrozenSet[str]:
  """The op types of a traced function (e.g. one of
  `Task.serving_signatures`) and of every function it calls."""
  graph = concrete_function.graph.as_graph_def()
  functions = {f.signature.name: f for f in graph.library.function}
  return frozenset(_op_types(graph.node, functions))


def not_in_core(op_types: Iterable[str]) -> FrozenSet[str]:
  """The op types that are not core TensorFlow ops: those missing from
  `tf.raw_ops`, which is generated from core TensorFlow's op registry when
  TensorFlow is built. Custom-op libraries (tensorflow_text) register their
  ops at run time and never add them there, so the answer does not depend on
  what this process has imported (the serving tests check it against the
  registry of a process that imported TensorFlow alone)."""
  return frozenset(op for op in op_types if not hasattr(tf.raw_ops, op))
