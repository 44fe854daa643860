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


@pytest.fixture
def golden_dir():
  return GOLDEN_DIR
