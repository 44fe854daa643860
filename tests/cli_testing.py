"""Running a binary as a user would, for the tests of a command line: its
output, and a user's mistake as one line on stderr with exit code 2
(`etc_realformer.cli`).

`run` starts a process (what a user sees, TensorFlow's start-up and stderr
included); `run_here` runs the same module as `__main__` in the test's own
process, without the seconds of start-up a process costs: each binary keeps
at least one test through `run`, its other cases use `run_here`.
"""

import contextlib
import io
import json
import pathlib
import re
import runpy
import subprocess
import sys
import warnings
from typing import Dict, List, Sequence, Tuple

from absl import flags
import gin

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


def run_here(module: str, args: Sequence[str]) -> subprocess.CompletedProcess:
  """`python -m module *args` run in this process (`runpy`), as `run` does.

  Flag values are unparsed before and after; the flags the binary defines
  under `__main__` are removed after it. A flag that another module of
  this process defined at import under the same name (a tool's --output_dir)
  is set aside while the binary runs, and put back. stdout and stderr are
  what the run writes to `sys.stdout` / `sys.stderr` (not absl's log lines,
  which a process's stderr would also hold: `run` sees those).
  """
  aside: List[Tuple[str, flags.Flag]] = []
  try:
    while True:
      try:
        return _run_module(module, args)
      except flags.DuplicateFlagError as e:
        # The binary's definitions stop at the first clash, before it runs:
        # set that flag aside and start it again.
        _remove_main_flags()
        name = re.search(r"flag '([^']+)' is defined twice", str(e))[1]
        aside.append((flags.FLAGS.find_module_defining_flag(name),
                      flags.FLAGS[name]))
        delattr(flags.FLAGS, name)
  finally:
    for module_name, flag in aside:
      if flag.name not in flags.FLAGS:
        flags.FLAGS[flag.name] = flag
        flags.FLAGS.register_flag_by_module(module_name, flag)
    flags.FLAGS.unparse_flags()


def _run_module(module: str, args: Sequence[str]
                ) -> subprocess.CompletedProcess:
  """One `run_here` attempt."""
  flags.FLAGS.unparse_flags()
  gin.clear_config()
  out, err = io.StringIO(), io.StringIO()
  argv, sys.argv = sys.argv, [module, *args]
  returncode = 0
  try:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
        warnings.catch_warnings():
      # runpy warns that the module is imported already (by the test): the
      # run executes it anew as __main__, as `python -m` does.
      warnings.filterwarnings("ignore", category=RuntimeWarning,
                              module="runpy")
      runpy.run_module(module, run_name="__main__", alter_sys=True)
  except SystemExit as e:
    if isinstance(e.code, str):
      err.write(e.code + "\n")
      returncode = 1
    else:
      returncode = e.code or 0
  finally:  # Also after an unexpected error: later runs start clean.
    sys.argv = argv
    gin.clear_config()
    _remove_main_flags()
  return subprocess.CompletedProcess([module, *args], returncode,
                                    out.getvalue(), err.getvalue())


def _remove_main_flags() -> None:
  """Removes the flags defined under `__main__` (absl names their module by
  `sys.argv[0]`: the file's path under runpy)."""
  fv = flags.FLAGS
  for module, module_flags in list(fv.flags_by_module_dict().items()):
    if module == "__main__" or module.endswith(".py"):
      for flag in list(module_flags):
        if flag.name in fv and fv[flag.name] is flag:
          delattr(fv, flag.name)


def prediction_and_gold(folder: pathlib.Path, predictions, gold
                        ) -> Tuple[pathlib.Path, pathlib.Path]:
  """A scorer's two inputs: `pred.json` and `gold.json` in `folder`, the
  two values written as JSON."""
  pred, gold_path = folder / "pred.json", folder / "gold.json"
  pred.write_text(json.dumps(predictions))
  gold_path.write_text(json.dumps(gold))
  return pred, gold_path


def output_here(module: str, args: Sequence[str]) -> str:
  """`run_here`s the binary to success (asserts exit code 0); its stdout."""
  proc = run_here(module, args)
  assert proc.returncode == 0, proc.stderr[-2000:]
  return proc.stdout


def user_error_line_here(module: str, args: Sequence[str],
                         *texts: str) -> str:
  """`user_error_line`, `run_here`."""
  proc = run_here(module, args)
  return assert_user_error(proc.returncode, proc.stderr, *texts)


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
