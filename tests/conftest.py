"""Shared pytest setup: quiet TF logs, deterministic seeds, test data paths."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# As the packages set it (etc_realformer/__init__.py), for the tests that
# import TensorFlow first, and for the binaries they start.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# XLA's CPU compiles (jit_compile, the fused path's host handlers, the
# exported modules that jaxlib runs) take most of the XLA tests' time, and
# most of that is LLVM optimizing the generated code. The tests check
# values, not speed, and LLVM's level does not change what the HLO
# computes: level 0 halves those tests' CPU time. Set before TensorFlow
# reads the flags, and inherited by the binaries the tests start.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = " ".join(
      filter(None, [os.environ.get("XLA_FLAGS"),
                    "--xla_backend_optimization_level=0"]))

# TensorFlow's CPU kernels from Eigen, not oneDNN, in the tests and the
# binaries they start: the suite's ops are small, where oneDNN's per-op
# set-up outweighs its speed (without it a featurizer or training test
# takes a fifth to a quarter less CPU, the whole suite about a third).
# The tests check values, which both libraries compute; the benchmarks,
# run as users run them, time TensorFlow's default (docs/benchmarks.md).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import pathlib  # noqa: E402

import pytest  # noqa: E402

DATA_DIR = pathlib.Path(__file__).parent / "data"
GOLDEN_DIR = DATA_DIR / "official_etc_small"


def pytest_configure(config):
  config.addinivalue_line("markers", "slow: a test that takes more than ~20 s")


def pytest_collection_modifyitems(config, items):
  """Runs the files that hold a slow test first.

  `--dist=loadfile` hands each worker whole files, in collection order
  with `--no-loadscope-reorder` (pytest.ini). The slowest files (the
  tasks' end-to-end tests, the tools' studies) hold one test each; last,
  one worker ran them alone while the other had nothing left. Longest
  first lets the two finish together. The sort is stable: the order within
  a file, and among the other files, is kept.
  """
  del config  # unused
  slow_files = {item.path for item in items
                if item.get_closest_marker("slow") is not None}
  items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture(autouse=True)
def _seeded():
  """Seeds Python, NumPy and TensorFlow before every test.

  A test's random draws (unseeded initialisers, dropout, sampled data)
  then do not depend on which tests ran before it in the same worker, so
  a test passes or fails the same way on every run. Resetting the global
  seed also resets TensorFlow's eager op-seed counter.
  """
  import tf_keras  # pylint: disable=g-import-not-at-top
  tf_keras.utils.set_random_seed(0)
  yield


@pytest.fixture
def golden_dir():
  return GOLDEN_DIR
