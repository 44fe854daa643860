"""XLA custom calls from a TensorFlow graph, through `xla.call_module`.

A typed-FFI custom call (`api_version = 4`) is written as a one-op
StableHLO module and emitted with TensorFlow's XlaCallModule op: under
`jit_compile`, TensorFlow's XLA runs the handler registered under the call's
name for the platform at hand (`ffi_library`), and the HLO that
`experimental_get_compiler_ir` exports carries the call
(`custom_call_target=...`, `api_version=API_VERSION_TYPED_FFI`), which
jaxlib compiles and runs wherever the same handler is registered.

Why not `xla.custom_call_v2`: it emits the legacy API version 3, which
TensorFlow's XLA does not look up among FFI handlers ("No registered
implementation for untyped custom call").
"""

from typing import Mapping, Sequence, Tuple, Union

import tensorflow as tf
from tensorflow.compiler.tf2xla.python import xla

# The module is compiled for either platform; its first argument is the
# platform's index (XlaCallModule's convention for several platforms),
# unused: each platform has its own handler under the same name.
PLATFORMS = ("CPU", "CUDA")
_ELEMENT = {tf.float32: "f32", tf.bfloat16: "bf16", tf.float16: "f16",
            tf.int32: "i32", tf.int8: "i8"}

Attribute = Union[bool, int, float]


def tensor_type(shape: Sequence[int], dtype: tf.DType) -> str:
  """The MLIR type of a static tensor, e.g. tensor<2x4xf32>."""
  if dtype not in _ELEMENT:
    raise ValueError(f"custom calls take {sorted(map(str, _ELEMENT))}, "
                     f"got {dtype}")
  if any(d is None for d in shape):
    raise ValueError(f"custom calls need static shapes, got {shape}")
  return "tensor<" + "".join(f"{d}x" for d in shape) + _ELEMENT[dtype] + ">"


def _attribute(name: str, value: Attribute) -> str:
  if isinstance(value, bool):
    return f"{name} = {'true' if value else 'false'}"
  if isinstance(value, int):
    return f"{name} = {value} : i64"
  if isinstance(value, float):
    return f"{name} = {value!r} : f32"
  raise ValueError(f"custom call attribute {name}: {value!r}")


def stablehlo_module(target: str, operands: Sequence[str],
                     results: Sequence[str],
                     attributes: Mapping[str, Attribute]) -> str:
  """The text of a module whose main(platform_index, *operands) returns
  `target`'s results (operand and result MLIR types)."""
  args = ", ".join(["%platform_index: tensor<i32>"] +
                   [f"%arg{i}: {t}" for i, t in enumerate(operands)])
  names = ", ".join(f"%arg{i}" for i in range(len(operands)))
  config = ", ".join(_attribute(k, v) for k, v in sorted(attributes.items()))
  result_types = ", ".join(results)
  outs = ", ".join(f"%0#{i}" for i in range(len(results)))
  return (
      "module @etc_custom_call attributes {mhlo.num_partitions = 1 : i32, "
      "mhlo.num_replicas = 1 : i32} {\n"
      f"  func.func public @main({args}) -> ({result_types}) {{\n"
      f"    %0:{len(results)} = stablehlo.custom_call @{target}({names}) "
      f"{{api_version = 4 : i32, backend_config = {{{config}}}}} : "
      f"({', '.join(operands)}) -> ({result_types})\n"
      f"    return {outs} : {result_types}\n"
      "  }\n"
      "}\n")


def custom_call(target: str, inputs: Sequence[tf.Tensor],
                results: Sequence[Tuple[Sequence[int], tf.DType]],
                attributes: Mapping[str, Attribute]) -> Tuple[tf.Tensor, ...]:
  """Emits the typed-FFI custom call `target(*inputs)`.

  Args:
    target: the registered handler's name.
    inputs: static-shaped tensors.
    results: (shape, dtype) of each result.
    attributes: the call's attributes (the handler's `.Attr<...>` names).

  Returns:
    The results. They are computed only under XLA (jit_compile), where the
    handler for the platform must be registered (`ffi_library`).
  """
  module = stablehlo_module(
      target, [tensor_type(x.shape.as_list(), x.dtype) for x in inputs],
      [tensor_type(shape, dtype) for shape, dtype in results], attributes)
  return tuple(xla.call_module(
      list(inputs), version=9, module=module,
      Tout=[dtype for _, dtype in results],
      Sout=[list(shape) for shape, _ in results],
      platforms=list(PLATFORMS)))
