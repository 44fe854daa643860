"""Running the project's shell scripts (tools/gpu/*.sh) with a stand-in
`python` first on PATH: it logs each command line it is given, so a test
checks the script's plan (the steps, their order and flags) without jax,
TensorFlow, a GPU or minutes of work.
"""

import os
import pathlib
import subprocess
import sys
from typing import Dict, List, Sequence, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[1]

# `cases`: bash case arms (pattern) command ;; run on the logged line.
STAND_IN = """#!/bin/bash
echo "$*" >>"$STEP_LOG"
case "$*" in
{cases}
esac
"""


def run_script(tmp_path: pathlib.Path, script: str, args: Sequence[str],
               cases: str = "", **env: str
               ) -> Tuple[subprocess.CompletedProcess, List[str]]:
  """Runs tools/`script` (e.g. "gpu/gpu_benchmark.sh") with the stand-in;
  returns its result and the command lines the stand-in was given, in
  order. `cases` may use {python} for the real interpreter (e.g. to run a
  step for real)."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir(exist_ok=True)
  python = bin_dir / "python"
  python.write_text(STAND_IN.format(
      cases=cases.replace("{python}", sys.executable)))
  python.chmod(0o755)
  log = tmp_path / "stand_in.log"
  log.write_text("")
  full_env: Dict[str, str] = dict(
      os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}",
      STEP_LOG=str(log), PYTHONPATH=str(ROOT), **env)
  result = subprocess.run(["bash", str(ROOT / "tools" / script), *args],
                          cwd=tmp_path, env=full_env, capture_output=True,
                          text=True, timeout=120)
  return result, log.read_text().splitlines()
