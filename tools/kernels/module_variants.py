r"""The fused kernels' cubins an exported module launches, read from its
custom calls, and which of them a build lacks.

    python -m tools.kernels.module_variants --modules=DIR[,DIR...] \
        [--cubins=gpu_kernels/cubins] [--json]

Each DIR a module folder (`tools.bench.benchmark --mode=xla_export`) or a
folder with modules anywhere under it. Prints per module the cubins its
`etc_branch_forward` and `etc_branch_backward` calls look up on CUDA; with
`--cubins`, the ones that build lacks, and exits 1 if any (a CUDA
handler fails the call whose cubin is missing: better known here than on
the GPU); `--json`: the variants as `tools.kernels.build_kernels` builds them
(its `--modules` reads this).

The names are the handlers' (`cc/cuda_handlers.h`, `VariantName`, which
`variants.variant_name` mirrors): the inputs' dtype and head
size from q, the relative vocabulary from per_id's third dimension, the
stream flags from the call's attributes, the streams' dtype from the sums
read or written, dropout from `keep_threshold`; each aligned for the
call's lengths (q's rows, k1's and k2's, `block_len`), which a handler
launches where the build has it and else the plain one
(`kernel_variants.launched`): a build lacks a call's kernel only when it
has neither.

jaxlib (its HLO to StableHLO converter and MLIR printer) reads the module;
neither TensorFlow nor Triton is imported.
"""

import argparse
import dataclasses
import json
import os
import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from tools.gpu import xla_runner
from tools.kernels import standalone

with standalone.bare_packages():
  from etc_realformer.kernels import format as kernel_format  # pylint: disable=g-import-not-at-top
  from etc_realformer.kernels import variants as kernel_variants  # pylint: disable=g-import-not-at-top

TARGETS = (kernel_format.FORWARD_TARGET, kernel_format.BACKWARD_TARGET)
# Operand positions (attention_ffi.cc, ETC_BRANCH_OPERANDS; the backward's
# ctx, lse, dctx, dnew1, dnew2 follow seeds).
Q, K1, K2, PER_ID, PREV1, PREV2 = 0, 1, 3, 5, 9, 10
DNEW1, DNEW2 = 18, 19
# The forward's results: ctx, lse, new1, new2.
NEW1, NEW2 = 2, 3
MLIR_TYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}

_CALL = re.compile(r"stablehlo\.custom_call @(\w+)\(.*?\{(.*)\}\s*:\s*"
                   r"\((.*)\)\s*->\s*(.*)$")
_ATTRIBUTE = re.compile(r"(\w+) = ([-\w.+]+)(?: : \w+)?")
_TENSOR = re.compile(r"tensor<([^>]*)>")


@dataclasses.dataclass(frozen=True)
class Call:
  """One custom call: its target, attributes (backend_config), and its
  operands' and results' (dtype, shape)."""
  target: str
  attributes: Dict[str, str]
  operands: Tuple[Tuple[str, Tuple[int, ...]], ...]
  results: Tuple[Tuple[str, Tuple[int, ...]], ...]


def _tensors(text: str) -> Tuple[Tuple[str, Tuple[int, ...]], ...]:
  out = []
  for body in _TENSOR.findall(text):
    *dims, dtype = body.split("x")
    out.append((dtype, tuple(int(d) for d in dims)))
  return tuple(out)


def parse_calls(text: str) -> List[Call]:
  """The kernels' custom calls in a module's StableHLO text."""
  calls = []
  for line in text.splitlines():
    match = _CALL.search(line)
    if not match or match.group(1) not in TARGETS:
      continue
    target, attrs, operands, results = match.groups()
    config = re.search(r"backend_config = \{([^}]*)\}", attrs)
    if config is None:
      raise ValueError(f"{target}: a call without its attributes: "
                       f"{line.strip()[:200]}")
    calls.append(Call(target, dict(_ATTRIBUTE.findall(config.group(1))),
                      _tensors(operands), _tensors(results)))
  return calls


def module_text(module_dir: str) -> str:
  """The module's StableHLO, as text (jaxlib's converter and printer)."""
  _, _, hlo_to_stablehlo = xla_runner._jax_modules()  # pylint: disable=protected-access
  from jax._src.interpreters import mlir  # pylint: disable=g-import-not-at-top
  from jax._src.lib.mlir import ir  # pylint: disable=g-import-not-at-top
  serialized = hlo_to_stablehlo(xla_runner.read_module(module_dir))
  with mlir.make_ir_context():
    return str(ir.Module.parse(serialized))


def call_variants(call: Call) -> List[kernel_variants.Variant]:
  """The cubins `call` looks up: the forward's one, or the backward's
  queries kernel and its keys kernel per pattern."""
  a = call.attributes
  flag = lambda name: a[name] == "true"
  dtype, q_shape = call.operands[Q]
  if dtype not in MLIR_TYPES:
    raise ValueError(f"{call.target}: q of type {dtype}: the kernels take "
                     f"{sorted(MLIR_TYPES)}")
  sources = int(a["sources"]) > 0
  read = (flag("read_prev1"), flag("read_prev2"))
  emit = (flag("emit1"), flag("emit2"))
  backward = call.target == "etc_branch_backward"
  # The sums read (prev, unless made from the sources) and written (new,
  # or in the backward their incoming gradients) share one dtype.
  streams = [call.operands[p] for p, r in zip((PREV1, PREV2), read)
             if r and not sources]
  written = (DNEW1, DNEW2) if backward else (NEW1, NEW2)
  pool = call.operands if backward else call.results
  streams += [pool[w] for w, e in zip(written, emit) if e]
  low = any(t != "f32" for t, _ in streams)
  digits = "".join(("s" if sources else "1") if r else "0" for r in read)
  digits += "".join("1" if e else "0" for e in emit)
  lengths = (q_shape[2], call.operands[K1][1][2], call.operands[K2][1][2],
             int(a["block_len"]))
  common = dict(
      dtype=MLIR_TYPES[dtype], head_size=q_shape[3],
      ids_padded=(kernel_variants.padded_ids(call.operands[PER_ID][1][2])
                  if flag("has_ids") else 0), band=flag("band"),
      low_streams=low, dropout=int(a["keep_threshold"]) > 0,
      by_rows=flag("by_rows"))
  if not backward:
    variants = [kernel_variants.Variant(streams=digits, **common)]
  else:
    variants = (
        [kernel_variants.Variant(streams=digits, kernel=kernel_variants.QUERIES,
                                 **common)] +
        [kernel_variants.Variant(streams=digits[p] + digits[p + 2],
                                 kernel=kernel_variants.KEYS, pattern=p + 1,
                                 **common) for p in range(2)])
  return [v.for_lengths(*lengths) for v in variants]


def module_dirs(paths: Sequence[str]) -> List[str]:
  """Module folders (each holds a manifest.json): each path one, or a
  folder with them anywhere under it."""
  out = []
  for path in paths:
    if not os.path.isdir(path):
      raise FileNotFoundError(f"{path}: no such folder")
    found = sorted(root for root, _, files in os.walk(path)
                   if "manifest.json" in files)
    if not found:
      raise FileNotFoundError(f"{path}: no exported module (manifest.json) "
                              f"in it or under it")
    out.extend(found)
  return out


def module_variants(module_dir: str) -> List[kernel_variants.Variant]:
  """Every cubin the module's calls look up, each once, in call order."""
  out: Dict[str, kernel_variants.Variant] = {}
  for call in parse_calls(module_text(module_dir)):
    for variant in call_variants(call):
      out.setdefault(variant.name, variant)
  return list(out.values())


def missing(variants: Sequence[kernel_variants.Variant], cubins_dir: str
            ) -> List[str]:
  """The names of the variants for which `cubins_dir` holds neither the
  cubin nor, for an aligned one, the plain one."""
  return [v.name for v in variants if not os.path.exists(os.path.join(
      cubins_dir, kernel_variants.launched(v, cubins_dir).name + ".cubin"))]


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--modules", required=True,
                      help="module folders, or folders with modules under "
                      "them, by commas")
  parser.add_argument("--cubins", default=None,
                      help="a build's cubins folder: say what it lacks")
  parser.add_argument("--json", action="store_true",
                      help="the variants as JSON (tools.kernels.build_kernels)")
  args = parser.parse_args(argv)
  try:
    dirs = module_dirs([p for p in args.modules.split(",") if p])
    found = {d: module_variants(d) for d in dirs}
  except (OSError, ValueError) as e:
    print(f"module_variants: {e}", file=sys.stderr)
    return 2
  if args.json:
    variants = {v.name: dataclasses.asdict(v)
                for vs in found.values() for v in vs}
    print(json.dumps(list(variants.values())))
    return 0
  lacking = 0
  for module_dir, variants in found.items():
    print(f"{module_dir}: {len(variants)} cubins")
    for variant in variants:
      name = variant.name
      absent = args.cubins and missing([variant], args.cubins)
      lacking += bool(absent)
      if args.cubins and not absent:
        name = kernel_variants.launched(variant, args.cubins).name
      print(f"  {name}{'  MISSING' if absent else ''}")
  if args.cubins:
    print(f"{lacking} missing from {args.cubins}")
  return 1 if lacking else 0


if __name__ == "__main__":
  sys.exit(main())
