"""Building and loading the FFI handlers' library: a missing or failing
compiler is one clear error and leaves no library; loading registers once
and names the library it loaded; it exports the handlers jaxlib registers."""

import ctypes
import os

import pytest

from etc_realformer.kernels import ffi_library
from tools.gpu import xla_runner


def test_missing_compiler_says_what_to_install(tmp_path):
  with pytest.raises(ffi_library.KernelBuildError, match="apt install g"):
    ffi_library.build_library(str(tmp_path), str(tmp_path),
                              compiler="no-such-compiler-xyz")


def test_failed_build_leaves_no_library(tmp_path):
  # `false` exits 1 like a compiler that rejected the source.
  with pytest.raises(ffi_library.KernelBuildError,
                     match="building attention_ffi.cc failed"):
    ffi_library.build_library(str(tmp_path / "out"), str(tmp_path),
                              compiler="false")
  assert os.listdir(tmp_path / "out") == []


def test_load_registers_once_and_returns_the_library():
  first = ffi_library.load_into_tensorflow()
  assert os.path.basename(first) == ffi_library.LIBRARY_NAME
  assert os.path.exists(first)
  assert ffi_library.load_into_tensorflow() == first


def test_library_exports_every_handler_that_jaxlib_registers():
  # tools/gpu/xla_runner.py registers these symbols into jaxlib by name.
  assert list(xla_runner.FFI_TARGETS) == ["etc_branch_forward",
                                          "etc_branch_backward"]
  library = ctypes.CDLL(ffi_library.load_into_tensorflow())
  for host, cuda in xla_runner.FFI_TARGETS.values():
    assert getattr(library, host) and getattr(library, cuda)
  with pytest.raises(AttributeError):  # the long-branch call it replaced
    getattr(library, "EtcLongBranchForwardHost")


def test_cache_folder_is_named_by_source_and_tensorflow(tmp_path,
                                                        monkeypatch):
  built = []

  def fake_build(folder, include_dir, compiler=None):
    del compiler  # unused
    built.append((folder, include_dir))
    return os.path.join(folder, ffi_library.LIBRARY_NAME)

  monkeypatch.setenv("ETC_KERNELS_CACHE", str(tmp_path))
  monkeypatch.setattr(ffi_library, "build_library", fake_build)
  path = ffi_library._cached_library()  # pylint: disable=protected-access
  folder, include_dir = built[0]
  assert os.path.dirname(folder) == str(tmp_path)
  assert len(os.path.basename(folder)) == 16
  assert path == os.path.join(folder, ffi_library.LIBRARY_NAME)
  assert include_dir.endswith(os.path.join("tensorflow", "include"))
  # Present: not built again.
  os.makedirs(folder)
  open(path, "w").close()
  assert ffi_library._cached_library() == path  # pylint: disable=protected-access
  assert len(built) == 1
