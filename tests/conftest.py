"""Shared pytest setup: quiet TF logs, deterministic seeds, test data paths."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# As the packages set it (etc_realformer/__init__.py), for the tests that
# import TensorFlow first, and for the binaries they start.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import pathlib  # noqa: E402

import pytest  # noqa: E402

DATA_DIR = pathlib.Path(__file__).parent / "data"
GOLDEN_DIR = DATA_DIR / "official_etc_small"


def pytest_configure(config):
  config.addinivalue_line("markers", "slow: a test that takes more than ~20 s")


def pytest_collection_modifyitems(config, items):
  """Files with a slow test first, in collection order otherwise.

  The suite runs with `--dist=loadfile` and `--no-loadscope-reorder`
  (pytest.ini), which hand files to the workers in collection order. The
  long end-to-end files hold one test or two each; handed out last (they
  are collected late, and xdist's default order is most tests first), they
  left one worker idle while the other finished them. Slow ones first
  balances the workers (every worker collects, so the order is the same on
  all).
  """
  del config
  slow_files = {item.path for item in items
                if item.get_closest_marker("slow")}
  items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture
def golden_dir():
  return GOLDEN_DIR
