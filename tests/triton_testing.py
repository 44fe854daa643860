"""Runs Triton kernels under Triton's interpreter in a child process.

Triton's compiler library and TensorFlow's carry the same LLVM options;
loading Triton into a process that has loaded TensorFlow aborts it
("Option ... registered more than once"). The test workers import
TensorFlow, so the kernels run in a child that imports torch, Triton and
the kernel module (by path: the package would import TensorFlow) alone.

    outputs = run_launches([Launch("long_side_forward", grid, args,
                                   constexprs, outputs={"ctx": ...})])
"""

import dataclasses
import os
import pathlib
import pickle
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Sequence, Tuple

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
  """
  kernel: str
  grid: Tuple[int, ...]
  args: Sequence[Any]
  constexprs: Dict[str, Any]
  outputs: Dict[str, Tuple[Tuple[int, ...], str]]
  dtypes: Dict[int, str] = dataclasses.field(default_factory=dict)


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


def _child(source: str, result: str) -> None:
  import importlib.util  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("triton_attention", KERNELS)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  with open(source, "rb") as f:
    launches = pickle.load(f)
  results = []
  for launch in launches:
    outs = {}
    for name, (shape, dtype) in launch.outputs.items():
      torch_dtype = getattr(torch, dtype)
      fill = -1 if not torch_dtype.is_floating_point else float("nan")
      outs[name] = torch.full(tuple(shape), fill, dtype=torch_dtype)
    args = []
    for i, arg in enumerate(launch.args):
      if isinstance(arg, str):
        args.append(outs[arg])
      elif isinstance(arg, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(arg))
        if i in launch.dtypes:
          t = t.to(getattr(torch, launch.dtypes[i]))
        args.append(t)
      else:
        args.append(arg)
    getattr(module, launch.kernel)[tuple(launch.grid)](*args,
                                                       **launch.constexprs)
    results.append({k: (v.float() if v.is_floating_point() else v).numpy()
                    for k, v in outs.items()})
  with open(result, "wb") as f:
    pickle.dump(results, f)


if __name__ == "__main__":
  _child(sys.argv[1], sys.argv[2])
