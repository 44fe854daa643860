"""The library's kernel modules imported without the package's `__init__`.

`etc_realformer/__init__.py` imports TensorFlow, which the GPU machine does
not have and with which Triton cannot share a process (their LLVM options
collide). The kernel modules that the build and the GPU tools need
(`etc_realformer.kernels.format`, `variants`, `reference`, `build`,
`triton_attention`, `ffi_library`) import nothing but each other, the
standard library, NumPy and Triton; under `bare_packages()`,
`from etc_realformer.kernels import variants` runs that module alone.
"""

import contextlib
import pathlib
import sys
import types
from typing import Iterator

ROOT = pathlib.Path(__file__).resolve().parents[2]
_PACKAGES = {
    "etc_realformer": ROOT / "etc_realformer",
    "etc_realformer.kernels": ROOT / "etc_realformer" / "kernels",
}


def install() -> None:
  """Registers `etc_realformer` and `etc_realformer.kernels` as bare
  packages over their folders, where they are not imported yet (a build's
  compiler processes: `build.write_cubins`' `worker_init`)."""
  for name, folder in _PACKAGES.items():
    if name not in sys.modules:
      package = types.ModuleType(name, f"{name} without its __init__")
      package.__path__ = [str(folder)]
      sys.modules[name] = package


@contextlib.contextmanager
def bare_packages() -> Iterator[None]:
  """`install()` for the imports in the block; the bare packages are gone
  after it (the modules it imported stay), so that a later import of the
  package in the same process runs its `__init__`."""
  added = [name for name in _PACKAGES if name not in sys.modules]
  install()
  try:
    yield
  finally:
    for name in added:
      sys.modules.pop(name, None)
