"""Builds and loads the C++ library of the kernels' XLA FFI handlers.

`cc/attention_ffi.cc` (with the sections it includes from `cc/`) holds, per
custom call, a host implementation (the CPU, and the tests) and a CUDA one
that launches the Triton kernels' cubins (`tools/kernels/build_kernels.py`). The
library is compiled with g++ against the header-only XLA FFI API that TensorFlow
ships (`tensorflow/include/xla/ffi`), needs no CUDA to build, and registers its
handlers into TensorFlow's XLA through
`EtcRegisterFfiHandlers(XLA_FFI_GetApi())` (`libtensorflow_framework.so.2`
exports `XLA_FFI_GetApi`).

`load_into_tensorflow()` builds the library once per source and TensorFlow
version into a cache folder (`ETC_KERNELS_CACHE`, default
`~/.cache/etc_realformer/kernels`), or loads the one `ETC_KERNELS_LIBRARY`
names (a build of `tools/kernels/build_kernels.py`, whose `cubins/` folder
beside it holds the GPU kernels). Only the `attention_kernel='fused'` path calls
it: a user who never asks for the fused kernels needs no compiler.
"""

import ctypes
import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
from typing import Optional

SOURCE = pathlib.Path(__file__).parent / "cc" / "attention_ffi.cc"
# What the one translation unit reads: SOURCE and the headers beside it.
SOURCES = (SOURCE,) + tuple(sorted(SOURCE.parent.glob("*.h")))
LIBRARY_NAME = "libetc_attention_ffi.so"

_lock = threading.Lock()
_loaded: Optional[str] = None


class KernelBuildError(RuntimeError):
  """The FFI library could not be built or registered (the message says
  why and what to install)."""


def build_library(output_dir: str, include_dir: str,
                  compiler: Optional[str] = None) -> str:
  """Compiles `cc/attention_ffi.cc` (one translation unit) into
  `output_dir/LIBRARY_NAME`.

  Args:
    output_dir: the folder of the library (created).
    include_dir: the folder that holds `xla/ffi/api/ffi.h` (TensorFlow's
      `include`, or jax's `jax.ffi.include_dir()`).
    compiler: the C++ compiler (default: $CXX, else g++).

  Returns:
    The library's path. The build is atomic (compiled aside, then moved).
  """
  compiler = compiler or os.environ.get("CXX", "g++")
  if shutil.which(compiler) is None:
    raise KernelBuildError(f"the fused attention kernels need a C++17 "
                           f"compiler to build their XLA FFI handlers: "
                           f"{compiler!r} not found (apt install g++)")
  os.makedirs(output_dir, exist_ok=True)
  target = os.path.join(output_dir, LIBRARY_NAME)
  with tempfile.TemporaryDirectory(dir=output_dir) as tmp:
    partial = os.path.join(tmp, LIBRARY_NAME)
    command = [compiler, "-std=c++17", "-O2", "-fPIC", "-shared",
               "-isystem", include_dir, str(SOURCE), "-o", partial, "-ldl"]
    done = subprocess.run(command, capture_output=True, text=True,
                          check=False)
    if done.returncode:
      raise KernelBuildError(f"building {SOURCE.name} failed: "
                             f"{' '.join(command)}\n{done.stderr[-3000:]}")
    os.replace(partial, target)
  return target


def _tensorflow_dir() -> str:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return os.path.dirname(tf.__file__)


def _cached_library() -> str:
  """The cached build for this source and TensorFlow (built when absent)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  digest = hashlib.sha256(b"".join(p.read_bytes() for p in SOURCES) +
                          tf.__version__.encode()).hexdigest()[:16]
  root = os.environ.get("ETC_KERNELS_CACHE", os.path.join(
      os.path.expanduser("~"), ".cache", "etc_realformer", "kernels"))
  folder = os.path.join(root, digest)
  path = os.path.join(folder, LIBRARY_NAME)
  if not os.path.exists(path):
    build_library(folder, os.path.join(_tensorflow_dir(), "include"))
  return path


def load_into_tensorflow() -> str:
  """Loads the library and registers its handlers into TensorFlow's XLA
  (once per process). Returns the library's path."""
  global _loaded
  with _lock:
    if _loaded is not None:
      return _loaded
    path = os.environ.get("ETC_KERNELS_LIBRARY") or _cached_library()
    framework = ctypes.CDLL(os.path.join(_tensorflow_dir(),
                                         "libtensorflow_framework.so.2"))
    framework.XLA_FFI_GetApi.restype = ctypes.c_void_p
    library = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    library.EtcRegisterFfiHandlers.argtypes = [ctypes.c_void_p]
    failed = library.EtcRegisterFfiHandlers(framework.XLA_FFI_GetApi())
    if failed:
      raise KernelBuildError(f"{path}: {failed} FFI handler(s) were not "
                             f"registered into TensorFlow's XLA")
    _loaded = path
    return path
