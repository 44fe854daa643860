"""Runs one pytest module as a Bazel test.

Every py_test in BUILD has this file as its `main` and the test module's
path (relative to the runfiles' root, the test's working directory) as its
argument:

    python tools/bazel_pytest.py tests/etc_realformer/errors_test.py

The test modules have no `__main__`; run as the main file themselves they
would define their tests and exit 0 without running one. Here the exit code
is pytest's, so the target fails when a test fails, and also when the module
collects no test at all (pytest's 5).
"""

import os
import sys


def _args(argv):
  args = list(argv)
  # pytest.ini's `addopts` and `pythonpath` apply: it is in the runfiles
  # (the py_test's data), the rootdir above the test file.
  xml = os.environ.get("XML_OUTPUT_FILE")
  if xml:  # Bazel's per-test report (bazel-testlogs/.../test.xml)
    args.append(f"--junitxml={xml}")
  tmp = os.environ.get("TEST_TMPDIR")
  if tmp:  # tmp_path under the test's own scratch dir, not /tmp
    args.append(f"--basetemp={os.path.join(tmp, 'pytest')}")
  return args


def main(argv):
  if not argv or not os.path.isfile(argv[0]):
    print(f"usage: bazel_pytest.py TEST_FILE [pytest args]; got {argv}",
          file=sys.stderr)
    return 2
  # Python put this file's folder (tools/, resolved through the runfiles'
  # symlink into the source tree) first on sys.path; its modules are not
  # top-level names.
  here = os.path.dirname(os.path.realpath(__file__))
  sys.path[:] = [p for p in sys.path
                 if os.path.realpath(p or os.curdir) != here]
  import pytest  # pylint: disable=g-import-not-at-top
  return int(pytest.main(_args(argv)))


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
