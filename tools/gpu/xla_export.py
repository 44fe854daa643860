"""Writes a `jit_compile` TensorFlow step as its XLA module, for
`tools.gpu.xla_runner` (which needs only jax/jaxlib and NumPy).

A module directory holds `module.hlo.pb.gz` (the serialized HloModuleProto
from `experimental_get_compiler_ir(...)(stage="hlo_serialized")`, gzipped:
a 12-layer module is ~16 MB, ~1.5 MB compressed), `inputs.npz`
(`arg_0000`, ... in the entry's parameter order: the flattened features in
`tf.nest` order, then the captured variables in capture order) and
`manifest.json` (the spec, every argument's name, shape and dtype, and
optionally TensorFlow's value of the step).
"""

import gzip
import json
import os
from typing import Any, Dict, List

MODULE_FILE = "module.hlo.pb.gz"

def write_module(tf, step_fn, features: Dict[str, Any], variables,
                 spec: Dict[str, Any]) -> Dict[str, Any]:
  """Writes `step_fn(features)` (a `jit_compile` tf.function) as its XLA
  module, inputs and manifest to `spec["export_dir"]`; `variables`: every
  variable the step may capture. Returns the export's summary fields."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  directory = spec["export_dir"]
  os.makedirs(directory, exist_ok=True)
  hlo = step_fn.experimental_get_compiler_ir(features)(stage="hlo_serialized")
  concrete = step_fn.get_concrete_function(features)
  flat = tf.nest.flatten(features, expand_composites=True)
  names = [f"feature/{path}" for path in nest_paths(features)]
  variables = list(variables)
  values = [t.numpy() for t in flat]
  for tensor in concrete.captured_inputs:
    owner = [v for v in variables if v.handle is tensor]
    if tensor.dtype == tf.resource:
      if not owner:
        raise ValueError(f"a captured resource of no model variable: {tensor}")
      names.append("variable/" + owner[0].name)
      values.append(owner[0].numpy())
    else:  # a captured constant
      names.append("captured")
      values.append(tensor.numpy())
  with gzip.open(os.path.join(directory, MODULE_FILE), "wb") as f:
    f.write(hlo)
  # Without `xla_weights`, the variables are not stored (base width is
  # ~0.5 GB): the runner draws random ones of their shapes, which times the
  # same; the features (ids, masks) are always stored.
  stored = [not n.startswith("variable/") or spec.get("xla_weights", True)
            for n in names]
  # Compressed: the side inputs (masks and relative ids, int32 over
  # [B, L, 3b] and [B, L, G]) repeat themselves and shrink ~100x, which is
  # what makes a 16k-token export small enough to carry to another machine.
  np.savez_compressed(os.path.join(directory, "inputs.npz"),
           **{f"arg_{i:04d}": v for i, (v, keep) in
              enumerate(zip(values, stored)) if keep})
  manifest = {"spec": {k: v for k, v in spec.items() if k != "export_dir"},
              "arguments": [{"name": n, "shape": list(v.shape),
                             "dtype": str(v.dtype), "stored": keep}
                            for n, v, keep in zip(names, values, stored)],
              "tensorflow_version": tf.__version__}
  if spec.get("xla_reference") and all(stored):
    manifest["reference_value"] = float(step_fn(features).numpy())
  with open(os.path.join(directory, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
  return {"export_dir": directory, "num_arguments": len(values),
          "hlo_bytes": len(hlo),
          "reference_value": manifest.get("reference_value")}


def nest_paths(structure) -> List[str]:
  """Names of a dict nest's leaves in `tf.nest.flatten` order."""
  if isinstance(structure, dict):
    return [f"{k}/{p}" if p else str(k) for k in sorted(structure)
            for p in nest_paths(structure[k])]
  return [""]
