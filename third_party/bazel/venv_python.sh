#!/bin/sh
# The interpreter of Bazel's Python toolchain (BUILD here): the repository's
# .venv/bin/python. Bazel runs this file from a test's or binary's runfiles,
# a tree of symlinks; resolved, it is this file in the checkout, two folders
# below the root that holds .venv. The venv's python is run by its own path
# (not resolved), so that Python finds the venv's pyvenv.cfg.
set -eu
here=$(dirname "$(readlink -f "$0")")
python="$here/../../.venv/bin/python"
if [ ! -x "$python" ]; then
  echo "venv_python.sh: no $python; make .venv with the README's command" >&2
  exit 1
fi
exec "$python" "$@"
