"""Builds, caches and loads the fused CPU kernels; decides where they run.

TensorFlow has no fused kernels for ETC's attention softmax, its post-LN
residual (ETC's LayerNorm epsilon, 1e-12, rules out TF's fused batch norm)
or the feed-forward's bias + gelu, and XLA's CPU backend (TF's own fuser)
ran that softmax slower than TF's ops and gives up oneDNN's matrix products
around it; so the project carries them (`side_softmax.cc`,
`residual_norm.cc`, `bias_gelu.cc`, helpers in `cpu_common.h`). They are
compiled into one library on first use against the installed TensorFlow's
headers (`tf.sysconfig`), with `-march=native` for the machine it runs on,
into a cache keyed by the sources, the TensorFlow version, the compiler and
the CPU's flags ($ETC_REALFORMER_KERNEL_CACHE, else
~/.cache/etc_realformer/kernels); later processes load the cached library.
`python -m etc_realformer.kernels.build` builds it ahead of time and prints
its path (about 30 s on two cores).

Where the kernels run (`use_fused_kernel`): only on the CPU, outside XLA
(a custom op cannot be compiled by XLA) and outside SavedModel export
(`disabled()`: TF Serving does not have the ops), and only when they build;
everywhere else the TensorFlow path, the reference, runs. The policy is
`EtcConfig.fused_attention_kernel`: "auto" (the above), "on" (the same, but
fail if the library cannot be built), "off".
"""

import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Iterator, List, Optional, Sequence

from absl import logging
import tensorflow as tf
# TF's own test for "being traced for XLA"; there is no public one.
from tensorflow.python.ops import control_flow_util  # pylint: disable=g-direct-tensorflow-import

from etc_realformer.config import FUSED_KERNEL_MODES

KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCES = tuple(os.path.join(KERNEL_DIR, name) for name in (
    "side_softmax.cc", "residual_norm.cc", "bias_gelu.cc"))
HEADERS = (os.path.join(KERNEL_DIR, "cpu_common.h"),)
CACHE_ENV = "ETC_REALFORMER_KERNEL_CACHE"
# The op types the library registers (none may reach an exported graph).
OP_TYPES = ("EtcSideSoftmax", "EtcSideSoftmaxGrad", "EtcResidualNorm",
            "EtcResidualNormGrad", "EtcBiasGelu", "EtcBiasGeluGrad")
COMPILE_TIMEOUT_S = 600


class KernelUnavailable(RuntimeError):
  """The fused kernels could not be built or loaded here."""


_lock = threading.Lock()
_module = None
_error: Optional[str] = None
_state = threading.local()


def _cpu_flags() -> str:
  try:
    with open("/proc/cpuinfo", "r", encoding="utf-8") as f:
      for line in f:
        if line.startswith(("flags", "Features")):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor()


def compiler() -> str:
  return os.environ.get("CXX", "g++")


def compile_flags() -> List[str]:
  """The g++ flags that compile one kernel source into an object."""
  # -ffp-contract=off: a vector loop and its scalar tail round alike (no
  # fused multiply-adds in one and not the other), so results do not depend
  # on where a row starts.
  return ([compiler(), "-O3", "-march=native", "-ffp-contract=off", "-fPIC",
           "-w", "-I", KERNEL_DIR] + tf.sysconfig.get_compile_flags())


def link_command(objects: Sequence[str], output: str) -> List[str]:
  return ([compiler(), "-shared", "-o", output, *objects] +
          tf.sysconfig.get_link_flags())


def _compile(sources: Sequence[str], output: str, workdir: str) -> None:
  """Compiles the sources side by side (one process per core: 29 s on two
  cores here, ~40 s one after another), then links them into `output`."""
  objects = [os.path.join(workdir, f"{i}.o") for i in range(len(sources))]
  commands = [compile_flags() + ["-c", src, "-o", obj]
              for src, obj in zip(sources, objects)]
  width = max(1, min(len(commands), os.cpu_count() or 1))
  failures = []
  for start in range(0, len(commands), width):
    running = [subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
               for cmd in commands[start:start + width]]
    for cmd, proc in zip(commands[start:start + width], running):
      try:
        _, err = proc.communicate(timeout=COMPILE_TIMEOUT_S)
      except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        err = f"timed out after {COMPILE_TIMEOUT_S} s\n{err}"
      if proc.returncode != 0:
        failures.append(f"{cmd[-3]} (exit {proc.returncode}):\n"
                        f"{err[-4000:]}")
  if failures:
    raise KernelUnavailable(f"compiling {KERNEL_DIR} failed: " +
                            "\n".join(failures))
  done = subprocess.run(link_command(objects, output), capture_output=True,
                        text=True, timeout=COMPILE_TIMEOUT_S, check=False)
  if done.returncode != 0:
    raise KernelUnavailable(f"linking {output} failed (exit "
                            f"{done.returncode}):\n{done.stderr[-4000:]}")


def cache_dir() -> str:
  base = os.environ.get(CACHE_ENV) or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
      "etc_realformer", "kernels")
  return base


def library_path() -> str:
  """Where the library for these sources, TF, compiler and CPU is cached."""
  sources = []
  for path in SOURCES + HEADERS:
    with open(path, "rb") as f:
      sources.append(f.read())
  try:
    version = subprocess.run([compiler(), "--version"], capture_output=True,
                             text=True, timeout=30, check=False).stdout
  except (OSError, subprocess.SubprocessError):
    version = "?"
  key = hashlib.sha256(b"\0".join([
      *sources, tf.__version__.encode(), version.encode(),
      _cpu_flags().encode(), " ".join(compile_flags()).encode(),
      " ".join(link_command((), "")).encode()
  ])).hexdigest()[:16]
  return os.path.join(cache_dir(), f"etc_kernels-{key}.so")


def build_library(path: Optional[str] = None) -> str:
  """Compiles the kernels into `path` (default: the cache) unless there."""
  path = path or library_path()
  if os.path.exists(path):
    return path
  os.makedirs(os.path.dirname(path), exist_ok=True)
  # One compiler per cache entry at a time (parallel test or benchmark
  # processes); the others wait and load its result.
  with open(path + ".lock", "w", encoding="utf-8") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if os.path.exists(path):
      return path
    if shutil.which(compiler()) is None:
      raise KernelUnavailable(f"no C++ compiler ({compiler()}) on PATH")
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
    os.close(fd)
    logging.info("Compiling the fused CPU kernels into %s", path)
    try:
      with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as work:
        _compile(SOURCES, tmp, work)
    except (OSError, subprocess.SubprocessError) as e:
      os.unlink(tmp)
      raise KernelUnavailable(f"compiling {KERNEL_DIR} failed: {e}") from e
    except KernelUnavailable:
      os.unlink(tmp)
      raise
    os.replace(tmp, path)
  return path


def load():
  """The loaded op module (`etc_side_softmax`, `etc_residual_norm`, ...).

  Raises:
    KernelUnavailable: it cannot be built or loaded here (the reason is kept
      and repeated on later calls without retrying).
  """
  global _module, _error
  with _lock:
    if _module is not None:
      return _module
    if _error is not None:
      raise KernelUnavailable(_error)
    try:
      _module = tf.load_op_library(build_library())
    except (KernelUnavailable, tf.errors.OpError, OSError) as e:
      _error = str(e)
      raise KernelUnavailable(_error) from e
    return _module


def available() -> bool:
  """Whether the kernels build and load here (logs why once if not)."""
  try:
    load()
    return True
  except KernelUnavailable as e:
    logging.log_first_n(logging.WARNING,
                        "Fused CPU kernels unavailable, using the "
                        "TensorFlow path: %s", 1, e)
    return False


@contextlib.contextmanager
def disabled() -> Iterator[None]:
  """Within this block (this thread) layers trace the TensorFlow path: for
  graphs that leave the process (SavedModel export)."""
  prev = getattr(_state, "disabled", False)
  _state.disabled = True
  try:
    yield
  finally:
    _state.disabled = prev


def _on_accelerator() -> bool:
  """Whether a GPU or TPU is visible: the kernel is registered for the CPU
  only, and in a model placed on an accelerator it would pull every score
  tensor over to the host and back."""
  return bool(tf.config.list_logical_devices("GPU") or
              tf.config.list_logical_devices("TPU"))


def use_fused_kernel(mode: str) -> bool:
  """Whether a layer traced now should call the fused kernels.

  Args:
    mode: `EtcConfig.fused_attention_kernel`.

  Raises:
    KernelUnavailable: `mode` is "on" and the kernels cannot be built.
  """
  if mode not in FUSED_KERNEL_MODES:
    raise ValueError(f"fused_attention_kernel must be one of "
                     f"{FUSED_KERNEL_MODES}, got {mode!r}")
  if mode == "off" or getattr(_state, "disabled", False):
    return False
  if control_flow_util.GraphOrParentsInXlaContext(
      tf.compat.v1.get_default_graph()):
    return False
  if _on_accelerator():
    return False
  if mode == "on":
    load()
    return True
  return available()


def main(argv: List[str]) -> int:
  del argv
  print(build_library())
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
