"""The suite's TensorFlow set-up (`conftest.py`): its processes run the Eigen
CPU kernels, and the golden vectors hold on TensorFlow's default ones too.

The suite runs without oneDNN because that is cheaper for its small ops;
users' CPU runs take TensorFlow's default, oneDNN, so the two golden
reproductions (ETC and RealFormer) run once more on it, in a process of
their own: the kernels are chosen when TensorFlow loads.
"""

import subprocess
import sys

import e2e_testing

# `IsMklEnabled` is what TensorFlow's own tests ask (`test_util`): whether
# this process runs the oneDNN kernels, after TF_ENABLE_ONEDNN_OPTS.
_ONEDNN_ON = ("from tensorflow.python.util import _pywrap_util_port; "
              "assert _pywrap_util_port.IsMklEnabled()")

GOLDEN_TESTS = [
    "tests/etc_realformer/networks/etc_model_test.py::"
    "test_reproduces_the_original_outputs",
    "tests/etc_realformer/networks/bert_model_test.py::"
    "test_reproduces_the_official_realformer_outputs",
]


def test_the_suite_runs_without_onednn():
  from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
  assert not _pywrap_util_port.IsMklEnabled()


def test_goldens_hold_on_tensorflows_default_cpu_kernels():
  env = dict(e2e_testing.env(), TF_ENABLE_ONEDNN_OPTS="1")
  script = (f"{_ONEDNN_ON}; import pytest, sys; "
            f"sys.exit(pytest.main(['-n0', *{GOLDEN_TESTS!r}]))")
  proc = subprocess.run([sys.executable, "-c", script], cwd=e2e_testing.REPO,
                        env=env, capture_output=True, text=True, timeout=300)
  output = proc.stdout + proc.stderr
  # (pytest exits with 5 when nothing was collected: 0 means they ran.)
  assert proc.returncode == 0, output[-4000:]
