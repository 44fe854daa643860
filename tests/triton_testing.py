"""Runs Triton kernels under Triton's interpreter in a child process.

Triton's compiler library and TensorFlow's carry the same LLVM options;
loading Triton into a process that has loaded TensorFlow aborts it
("Option ... registered more than once"). The test workers import
TensorFlow, so the kernels run in a child that imports torch, Triton and
the kernel module (by path: the package would import TensorFlow) alone.

    outputs = run_launches([Launch("long_branch_forward", grid, args,
                                   constexprs, outputs={"ctx": ...})])

Every launch runs under a memory check: each tensor lies between two
guard regions, and every load and store the interpreter makes must fall
inside one of the launch's tensors. The interpreter reads and writes raw
addresses unchecked, so a lane the kernel forgets to mask reads a
neighbour's bytes here and passes, where on a GPU it reads another
buffer or faults (what compute-sanitizer's memcheck reports); the check
fails the launch instead, naming the kernel, the operation and the
nearest tensor.
"""

import dataclasses
import os
import pathlib
import pickle
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNELS = ROOT / "etc_realformer" / "kernels" / "triton_attention.py"


@dataclasses.dataclass
class Launch:
  """One kernel launch.

  Attributes:
    kernel: a `triton.jit` function of the kernel module, by name.
    grid: the launch grid.
    args: in the kernel's order: NumPy arrays (passed as torch tensors, in
      `dtypes[i]` when set, e.g. "bfloat16"), output names (str: the
      tensor from `outputs`), or Python ints.
    constexprs: the kernel's constexpr arguments.
    outputs: name -> (shape, dtype name); filled with NaN before the launch
      (or -1 for integers), so an unwritten element shows.
    dtypes: per argument index, the torch dtype name to cast an array to.
    source: the file that defines `kernel` (default: the kernel module).
  """
  kernel: str
  grid: Tuple[int, ...]
  args: Sequence[Any]
  constexprs: Dict[str, Any]
  outputs: Dict[str, Tuple[Tuple[int, ...], str]]
  dtypes: Dict[int, str] = dataclasses.field(default_factory=dict)
  source: Optional[str] = None


def run_launches(launches: List[Launch]) -> List[Dict[str, np.ndarray]]:
  """The outputs of each launch (float outputs as float32 NumPy arrays)."""
  with tempfile.TemporaryDirectory() as tmp:
    source, result = os.path.join(tmp, "in.pkl"), os.path.join(tmp, "out.pkl")
    with open(source, "wb") as f:
      pickle.dump(launches, f)
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, __file__, source, result],
                          env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode:
      raise RuntimeError(f"interpreted kernels failed:\n{done.stderr[-4000:]}")
    with open(result, "rb") as f:
      return pickle.load(f)


# Bytes of guard on each side of a tensor: more than a tile row past the
# end of any test shape, so a stray lane lands in a guard, not in the next
# tensor.
GUARD_BYTES = 1 << 20


class MemoryCheck:
  """The launch's tensors as address ranges; `check` raises where an
  active lane of a load or store falls outside all of them."""

  def __init__(self):
    self.kernel = ""
    self.regions: List[Tuple[int, int, str]] = []  # (start, end, name)
    self.starts = self.ends = np.zeros(0, np.uint64)

  def set(self, kernel: str, tensors: Dict[str, Any]) -> None:
    self.kernel = kernel
    self.regions = sorted(
        (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), name)
        for name, t in tensors.items())
    # Once per launch, not per load: the check runs on every memory op.
    self.starts = np.array([r[0] for r in self.regions], np.uint64)
    self.ends = np.array([r[1] for r in self.regions], np.uint64)

  def check(self, operation: str, ptrs, mask) -> None:
    addresses = ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)]
    if not addresses.size:
      return
    size = ptrs.get_element_ty().primitive_bitwidth // 8
    index = np.searchsorted(self.starts, addresses, side="right") - 1
    inside = (index >= 0) & (addresses + np.uint64(size) <=
                             self.ends[np.maximum(index, 0)])
    if inside.all():
      return
    bad = int(addresses[~inside][0])
    nearest = min(self.regions, key=lambda r: min(abs(bad - r[0]),
                                                  abs(bad - r[1])))
    where = (f"{bad - nearest[1]} bytes past the end of" if bad >= nearest[1]
             else f"{nearest[0] - bad} bytes before")
    raise RuntimeError(
        f"{self.kernel}: a {operation} of {int((~inside).sum())} lanes "
        f"outside every tensor (the first {where} {nearest[2]})")


def _install(check: MemoryCheck) -> None:
  """Routes the interpreter's loads and stores through `check`: the
  builder's two memory entry points (Triton 3.9's interpreter, the
  version requirements-kernels.txt pins; a rename fails here, loudly)."""
  from triton.runtime import interpreter  # pylint: disable=g-import-not-at-top
  builder = interpreter.interpreter_builder
  load, store = builder.create_masked_load, builder.create_masked_store

  def checked_load(ptrs, mask, other, cache_policy, is_volatile):
    check.check("load", ptrs, mask)
    return load(ptrs, mask, other, cache_policy, is_volatile)

  def checked_store(ptrs, value, mask, cache_policy):
    check.check("store", ptrs, mask)
    return store(ptrs, value, mask, cache_policy)

  # Instance attributes: `create_load` and `create_store` call these too.
  builder.create_masked_load = checked_load
  builder.create_masked_store = checked_store


def _guarded(torch, shape, dtype):
  """A tensor of `shape` inside a buffer with GUARD_BYTES either side
  (NaN, or -1 for integers, everywhere)."""
  numel = int(np.prod(shape, dtype=np.int64))
  guard = -(-GUARD_BYTES // torch.empty((), dtype=dtype).element_size())
  fill = float("nan") if dtype.is_floating_point else -1
  buffer = torch.full((guard + numel + guard,), fill, dtype=dtype)
  return buffer[guard:guard + numel].view(tuple(shape))


def _load_module(path: str):
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location(
      pathlib.Path(path).stem, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _child(source: str, result: str) -> None:
  import torch  # pylint: disable=g-import-not-at-top
  check = MemoryCheck()
  _install(check)
  modules = {}
  with open(source, "rb") as f:
    launches = pickle.load(f)
  results = []
  for launch in launches:
    path = launch.source or str(KERNELS)
    if path not in modules:
      modules[path] = _load_module(path)
    outs = {}
    for name, (shape, dtype) in launch.outputs.items():
      outs[name] = _guarded(torch, shape, getattr(torch, dtype))
    args, tensors = [], dict(outs)
    for i, arg in enumerate(launch.args):
      if isinstance(arg, str):
        args.append(outs[arg])
      elif isinstance(arg, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(arg))
        if i in launch.dtypes:
          t = t.to(getattr(torch, launch.dtypes[i]))
        guarded = _guarded(torch, t.shape, t.dtype)
        guarded.copy_(t)
        tensors[f"argument {i}"] = guarded
        args.append(guarded)
      else:
        args.append(arg)
    check.set(launch.kernel, tensors)
    getattr(modules[path], launch.kernel)[tuple(launch.grid)](
        *args, **launch.constexprs)
    results.append({k: (v.float() if v.is_floating_point() else v).numpy()
                    for k, v in outs.items()})
  with open(result, "wb") as f:
    pickle.dump(results, f)


if __name__ == "__main__":
  _child(sys.argv[1], sys.argv[2])
