"""Running a binary as a user would, for the tests of a command line: its
output, and a user's mistake as one line on stderr with exit code 2
(`etc_realformer.cli`)."""

import subprocess
import sys
from typing import Dict, Sequence

import e2e_testing


def env() -> Dict[str, str]:
  """`e2e_testing.env()` with TF's own C++ log off (e.g. a failed CUDA probe
  on a machine without a GPU), so that stderr is the binary's."""
  return dict(e2e_testing.env(), TF_CPP_MIN_LOG_LEVEL="3")


def start(module: str, args: Sequence[str]) -> subprocess.Popen:
  """`python -m module *args` from the repository, started (text pipes)."""
  return subprocess.Popen([sys.executable, "-m", module, *args],
                          cwd=e2e_testing.REPO, env=env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run(module: str, args: Sequence[str],
        timeout: int = 120) -> subprocess.CompletedProcess:
  """`python -m module *args` from the repository, to completion."""
  return subprocess.run([sys.executable, "-m", module, *args],
                        cwd=e2e_testing.REPO, env=env(), text=True,
                        capture_output=True, timeout=timeout)


def output(module: str, args: Sequence[str], timeout: int = 120) -> str:
  """`run`s the binary to success (asserts exit code 0); its stdout."""
  proc = run(module, args, timeout)
  assert proc.returncode == 0, proc.stderr[-2000:]
  return proc.stdout


def user_error_line(module: str, args: Sequence[str], *texts: str,
                    timeout: int = 120) -> str:
  """`run`s the binary into a user's mistake (`assert_user_error` with
  `texts`); returns its one error line."""
  proc = run(module, args, timeout)
  return assert_user_error(proc.returncode, proc.stderr, *texts)


def assert_user_error(returncode: int, stderr: str, *texts: str) -> str:
  """Exit code 2 and exactly one stderr line, "error: ..." holding every
  text of `texts`; returns that line."""
  lines = stderr.strip().splitlines()
  assert returncode == 2, stderr[-3000:]
  assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
  for text in texts:
    assert text in lines[0], (text, lines[0])
  return lines[0]
