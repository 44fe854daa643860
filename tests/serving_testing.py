"""Serving-test helpers (tests/tasks/*/serving_test.py): a task's export,
its signatures as a server reads them from `saved_model.pb`, the tables of
`etc_realformer/export/README.md` they are checked against, a batch's
outputs compared record by record with the one-record signature's, and an
export served from a fresh process that has only `tensorflow` and
`tensorflow_text`."""

import json
import os
import re
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np
import tensorflow as tf

from etc_realformer.export import saved_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "etc_realformer", "export", "README.md")

Outputs = Dict[str, np.ndarray]
# name -> (dtype name, shape: -1 = unknown), as in a SignatureDef.
Specs = Dict[str, Tuple[str, Tuple[int, ...]]]


def export(task, model, export_dir: str) -> Tuple[Dict[str, Any], str]:
  """Builds the model, traces the task's signatures and saves them as the
  exporter does; (name -> concrete function, SavedModel path)."""
  model(task.dummy_features(), training=False)
  signatures = task.serving_signatures(model)
  path = saved_model.export_saved_model(model, signatures, export_dir,
                                        assets=task.export_assets(),
                                        version=1)
  return signatures, path


def call(signature, inputs: Mapping[str, Any]) -> Outputs:
  """A signature's outputs, as NumPy, for NumPy / Python inputs."""
  out = signature(**{k: tf.constant(v) for k, v in inputs.items()})
  return {k: np.asarray(v.numpy()) for k, v in out.items()}


def padded(rows: Sequence[Sequence[Any]], dtype: Any, fill: Any
           ) -> np.ndarray:
  """Rows of different lengths -> [B, longest], padded with `fill`."""
  width = max(len(r) for r in rows)
  out = np.full([len(rows), width], fill, dtype)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


def tf_serving_padding(inputs: Mapping[str, np.ndarray],
                       counts: Mapping[str, Sequence[int]]
                       ) -> Dict[str, np.ndarray]:
  """`inputs` with row b of each `counts` tensor holding, past counts[b],
  the tensor's first value: what TF Serving's `pad_variable_length_inputs`
  pads with when it batches requests of different lengths."""
  out = dict(inputs)
  for name, row_counts in counts.items():
    x = np.array(inputs[name], copy=True)
    for b, n in enumerate(row_counts):
      x[b, n:] = x.flat[0]
    out[name] = x
  return out


def assert_batch_equals_records(batch: Outputs, records: Sequence[Outputs],
                                padding: Mapping[str, Any]) -> None:
  """Row b of every batched output equals record b's output: a scalar the
  same, a vector [n] the row's first n values, and the rest of the row the
  output's padding value (`padding[name]`; 0 / "" when not named)."""
  assert set(batch) == set(records[0]), (sorted(batch), sorted(records[0]))
  for name, values in batch.items():
    assert values.shape[0] == len(records), (name, values.shape)
    for b, record in enumerate(records):
      want, got = np.asarray(record[name]), np.asarray(values[b])
      if want.ndim == 1 and got.ndim == 1 and got.shape != want.shape:
        rest = got[want.shape[0]:]
        fill = padding.get(name, b"" if got.dtype == object else 0)
        assert (rest == fill).all(), (name, b, rest)
        got = got[:want.shape[0]]
      assert got.shape == want.shape, (name, b, got.shape, want.shape)
      if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6,
                                   err_msg=f"{name}, record {b}")
      else:
        np.testing.assert_array_equal(got, want, err_msg=f"{name}, record {b}")


# -------------------------------------------------------------- signatures
def signature_specs(saved_dir: str) -> Dict[str, Dict[str, Specs]]:
  """Signature name -> {"inputs": Specs, "outputs": Specs}, read from the
  SavedModel's SignatureDefs (what TF Serving's metadata shows)."""
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
  saved = saved_model_pb2.SavedModel()
  with open(os.path.join(saved_dir, "saved_model.pb"), "rb") as f:
    saved.ParseFromString(f.read())
  (meta,) = saved.meta_graphs

  def specs(tensors) -> Specs:
    return {name: (tf.dtypes.as_dtype(t.dtype).name,
                   tuple(d.size for d in t.tensor_shape.dim))
            for name, t in tensors.items()}

  return {name: {"inputs": specs(s.inputs), "outputs": specs(s.outputs)}
          for name, s in meta.signature_def.items()
          if name != "__saved_model_init_op"}


def function_specs(signatures: Mapping[str, Any]
                   ) -> Dict[str, Dict[str, Specs]]:
  """`signature_specs` of traced signatures (`Task.serving_signatures`),
  before any export: their input specs' names and their output dicts."""
  def spec(t) -> Tuple[str, Tuple[int, ...]]:
    return t.dtype.name, tuple(-1 if d is None else d
                               for d in t.shape.as_list())

  out = {}
  for name, function in signatures.items():
    args, kwargs = function.structured_input_signature
    inputs = dict(kwargs)
    for arg in args:
      inputs.update(arg if isinstance(arg, dict) else {arg.name: arg})
    out[name] = {"inputs": {k: spec(v) for k, v in inputs.items()},
                 "outputs": {k: spec(v) for k, v in
                             function.structured_outputs.items()}}
  return out


# The README's `name`, `other` dtype [shape] entries of a table cell.
_SPEC = re.compile(r"((?:`\w+`,? )+)(\w+) \[([^\]]*)\]")


def _section(heading: str) -> List[str]:
  """The lines of the README's section under the line `heading`."""
  with open(README) as f:
    lines = f.read().splitlines()
  start = lines.index(heading) + 1
  end = next((i for i in range(start, len(lines))
              if lines[i].startswith("#")), len(lines))
  return lines[start:end]


def _cells(line: str) -> List[str]:
  return [c.strip() for c in line.strip().strip("|").split("|")]


def readme_signatures(title: str) -> Dict[str, Dict[str, Dict[str, Tuple[
    str, Tuple[str, ...]]]]]:
  """The signature table of the README's "### <title>" section: signature
  -> {"inputs", "outputs"} -> name -> (dtype, shape as written)."""
  out = {}
  for line in _section(f"### {title}"):
    cells = _cells(line)
    if len(cells) != 3 or not cells[0].startswith("`"):
      continue
    name = cells[0].strip("`")
    parsed = {}
    for part, cell in zip(("inputs", "outputs"), cells[1:]):
      parsed[part] = {}
      for names, dtype, shape in _SPEC.findall(cell):
        dims = tuple(d.strip() for d in shape.split(",") if d.strip())
        for n in re.findall(r"`(\w+)`", names):
          parsed[part][n] = (dtype, dims)
    out[name] = parsed
  return out


def readme_ops(task_name: str) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
  """The README's custom-op table row of `task_name`: (the op types not in
  core TensorFlow, the signatures that run them)."""
  for line in _section("## Ops not in core TensorFlow"):
    cells = _cells(line)
    if cells and cells[0] == task_name:
      return (tuple(sorted(re.findall(r"`(\w+)`", cells[1]))),
              tuple(sorted(re.findall(r"`(\w+)`", cells[2]))))
  raise AssertionError(f"no row for {task_name} in the README's op table")


def assert_readme_documents(title: str,
                            exported: Mapping[str, Mapping[str, Specs]],
                            sizes: Mapping[str, int]) -> None:
  """The README's table of `title` lists exactly the `exported` signatures
  (`signature_specs` or `function_specs`), inputs and outputs, with their
  dtypes and shapes.

  A dimension written as a letter of `sizes` (the task's L, G) must be that
  size (or unknown, for an output); any other letter (B, C, S, ...) must be
  unknown; a number, that number.
  """
  documented = readme_signatures(title)
  assert sorted(documented) == sorted(exported), (sorted(documented),
                                                  sorted(exported))
  for name, parts in exported.items():
    for part, specs in parts.items():
      written = documented[name][part]
      # A static size may be unknown in an output's spec, never an input's.
      unknown = -1 if part == "outputs" else None
      assert sorted(written) == sorted(specs), (name, part, sorted(written),
                                                sorted(specs))
      for key, (dtype, shape) in specs.items():
        want_dtype, want_shape = written[key]
        where = f"{title}: {name} {part} `{key}`"
        assert dtype == want_dtype, (where, dtype, want_dtype)
        assert len(shape) == len(want_shape), (where, shape, want_shape)
        for dim, want in zip(shape, want_shape):
          if want.isdigit():
            assert dim in (int(want), unknown), (where, shape, want_shape)
          elif want in sizes:
            assert dim in (sizes[want], unknown), (where, shape, want_shape)
          else:
            assert dim == -1, (where, shape, want_shape)


# ---------------------------------------------------------- fresh process
# Project packages: none may be importable in the fresh process (the venv
# could hold an editable install of the project).
PROJECT_PACKAGES = ("etc_realformer", "tasks", "demos", "tools", "tests")

_FRESH_SCRIPT = r"""
import importlib.abc
import json
import sys

PROJECT = set(json.loads(sys.argv[1])["project"])


class NoProjectCode(importlib.abc.MetaPathFinder):

  def find_spec(self, name, path=None, target=None):
    if name.partition(".")[0] in PROJECT:
      raise ImportError(f"{name}: project code is not importable here")
    return None


sys.meta_path.insert(0, NoProjectCode())

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import op_def_registry

args = json.loads(sys.argv[1])
report = {"unregistered": sorted(op for op in args["ops"]
                                 if op_def_registry.get(op) is None)}
try:  # Before tensorflow_text registers its ops.
  tf.saved_model.load(args["saved"])
  report["without_text"] = "loaded"
except Exception as e:  # pylint: disable=broad-except
  report["without_text"] = f"{type(e).__name__}: {e}"[:500]
import tensorflow_text  # noqa: F401  registers the tokenizer ops

loaded = tf.saved_model.load(args["saved"])
report["signatures"] = sorted(loaded.signatures)
inputs = np.load(args["inputs"], allow_pickle=True)
outputs = {}
for label, (signature, names) in args["calls"].items():
  result = loaded.signatures[signature](
      **{n: tf.constant(inputs[f"{label}/{n}"]) for n in names})
  outputs.update({f"{label}/{k}": v.numpy() for k, v in result.items()})
np.savez(args["outputs"], **outputs)
report["project_modules"] = sorted(
    m for m in sys.modules if m.partition(".")[0] in PROJECT)
print("RESULT " + json.dumps(report))
"""


def serve_in_fresh_process(
    saved_dir: str, calls: Mapping[str, Tuple[str, Mapping[str, Any]]],
    work_dir: str, op_types: Sequence[str], timeout: int = 180
) -> Tuple[Dict[str, Any], Dict[str, Outputs]]:
  """Loads `saved_dir` in a new Python (`-I`: no PYTHONPATH, no user site,
  cwd `work_dir` outside the repository, project packages unimportable)
  that imports only tensorflow, then tensorflow_text, and calls signatures.

  Args:
    saved_dir: the SavedModel.
    calls: label -> (signature name, its inputs as arrays).
    work_dir: a scratch directory (the process' cwd).
    op_types: op types to look up in that process' registry before
      tensorflow_text is imported.

  Returns:
    (report: `unregistered` (those of `op_types` unknown to TensorFlow
    alone), `without_text` (what loading did before tensorflow_text was
    imported), `signatures`, `project_modules` (imported ones: none);
    label -> the call's outputs).
  """
  inputs = {f"{label}/{k}": np.asarray(v)
            for label, (_, feeds) in calls.items() for k, v in feeds.items()}
  inputs_path = os.path.join(work_dir, "inputs.npz")
  outputs_path = os.path.join(work_dir, "outputs.npz")
  np.savez(inputs_path, **inputs)
  args = {"project": PROJECT_PACKAGES, "saved": saved_dir,
          "inputs": inputs_path, "outputs": outputs_path,
          "ops": sorted(op_types),
          "calls": {label: (signature, sorted(feeds))
                    for label, (signature, feeds) in calls.items()}}
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env.update(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  proc = subprocess.run(
      [sys.executable, "-I", "-c", _FRESH_SCRIPT, json.dumps(args)],
      cwd=work_dir, env=env, capture_output=True, text=True,
      timeout=timeout)
  assert proc.returncode == 0, proc.stderr[-4000:]
  report = json.loads(proc.stdout.split("RESULT ", 1)[1])
  with np.load(outputs_path, allow_pickle=True) as saved:
    flat = {k: saved[k] for k in saved.files}
  outputs: Dict[str, Outputs] = {label: {} for label in calls}
  for key, value in flat.items():
    label, name = key.split("/", 1)
    outputs[label][name] = value
  return report, outputs


def assert_same_outputs(got: Outputs, want: Outputs, where: str) -> None:
  assert sorted(got) == sorted(want), (where, sorted(got), sorted(want))
  for k, v in want.items():
    if np.issubdtype(np.asarray(v).dtype, np.floating):
      np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-6,
                                 err_msg=f"{where}: {k}")
    else:
      np.testing.assert_array_equal(got[k], v, err_msg=f"{where}: {k}")


def assert_readme_documents_signatures_and_ops(
    title: str, signatures: Mapping[str, Any],
    sizes: Mapping[str, int]) -> None:
  """The export README's section `title` lists these traced signatures
  (`assert_readme_documents`) and exactly the non-core ops they use, and
  which signatures use them (`readme_ops`)."""
  from etc_realformer.export import ops  # pylint: disable=g-import-not-at-top
  assert_readme_documents(title, function_specs(signatures), sizes)
  by_signature = {k: ops.not_in_core(ops.function_op_types(f))
                  for k, f in signatures.items()}
  listed_ops, listed_signatures = readme_ops(title)
  assert sorted(set().union(*by_signature.values())) == list(listed_ops)
  assert sorted(k for k, v in by_signature.items() if v) == list(
      listed_signatures)


def assert_bad_inputs_named(signature, good: Mapping[str, Any],
                            cases: Sequence[Tuple[str, Any, str]]) -> None:
  """Each (input, bad value, message) of `cases`, put in place of that input
  of `good`, fails with an InvalidArgumentError matching the message."""
  import pytest  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for name, value, message in cases:
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      call(signature, {**good, name: value})
