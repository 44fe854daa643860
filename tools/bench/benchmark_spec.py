"""What one benchmark measurement runs, typed: `Spec`.

A `Spec` is three parts, each named as what it configures:

* `run` (`RunSpec`): the benchmark's own settings -- the kind of
  measurement, the pass, the lengths, the batch, the precision, XLA, the
  random inputs and the timing protocol;
* `etc_config`: the `EtcConfig` fields the benchmark sets (sizes, residual
  attention, gradient checkpointing); every other field is EtcConfig's
  default (e.g. the dropout that `fwd_bwd` and the training steps apply);
* `execution`: the `ExecutionConfig` fields.

`tools.bench.benchmark` builds specs from its flags and sends each to
`tools.bench.benchmark_worker` as JSON (`to_json` / `from_json`); the worker
builds `EtcConfig(**spec.etc_config)` and `ExecutionConfig(**spec.execution)`. A
record (`record_fields`) keeps the run's fields at its top level (the keys
`tools.bench.benchmark_plot` and the earlier records read: `pass`, `long_len`,
`global_len_mode`, ...) and the two configs' fields under `etc_config` and
`execution`.

This module imports neither TensorFlow nor the library (whose package
imports TensorFlow), so that the benchmark's parent process stays small:
the `ExecutionConfig` fields the sweep varies, with their defaults, are
written here once (`EXECUTION_AXES`; a test checks them against
`ExecutionConfig()`).
"""

import dataclasses
import json
from typing import Any, Callable, Dict, NamedTuple, Optional

# `RunSpec.kind`: what is measured (tools.bench.benchmark's --mode).
KINDS = ("encoder", "matmul_floor", "finetune", "pretrain", "xla_export")
TRAINING_KINDS = ("finetune", "pretrain")
# `RunSpec.pass_`: the encoder's forward, forward+backward, or a training
# step.
PASSES = ("fwd", "fwd_bwd", "train_step")
DTYPES = ("float32", "mixed_bfloat16", "mixed_float16")
_DTYPE_TAGS = {"float32": "f32", "mixed_bfloat16": "bf16",
               "mixed_float16": "f16"}


class Axis(NamedTuple):
  """An `ExecutionConfig` field the sweep varies."""
  default: Any  # ExecutionConfig's default
  tag: Callable[[Any], str]  # its part of a variant name when not default


# In variant-name order. att_implementation is named first, as the path.
EXECUTION_AXES: Dict[str, Axis] = {
    "att_implementation": Axis("auto", str),
    "recompute_attention": Axis(False, lambda v: "recatt"),
    "recompute_residual_streams": Axis(False, lambda v: "recstreams"),
    "softmax_dtype": Axis("float32", lambda v: f"smx{v}"),
    "stream_dtype": Axis("float32", lambda v: f"str{v}"),
    "dropout_rng": Axis("philox", lambda v: f"rng{v}"),
    "attention_chunk_len": Axis("auto", lambda v: f"chunk{v}"),
    "attention_kernel": Axis("xla", str),
}
# The values of ExecutionConfig's string fields (etc_realformer/execution.py).
ATT_IMPLEMENTATIONS = ("sparse", "full")
SOFTMAX_DTYPES = ("float32", "compute")
STREAM_DTYPES = ("float32", "compute")
DROPOUT_RNGS = ("philox", "hash")
ATTENTION_KERNELS = ("xla", "fused")


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """The benchmark's own settings of one measurement.

  Attributes:
    kind: one of KINDS.
    pass_: one of PASSES ("pass" in JSON).
    long_len, global_len: L and G.
    global_len_mode: how G was chosen ("L/16" or the fixed G), for names.
    batch_size: examples per step.
    tokens_per_sentence: long tokens per sentence of the random inputs.
    pad_fraction: the share of each row's long tokens that is padding.
    seed: inputs, weights and masks.
    dtype: one of DTYPES (the Keras mixed-precision policy).
    xla: `jit_compile` the step.
    warmup, repeats: untimed calls first, then timed ones.
    intra_op_threads, inter_op_threads: TensorFlow's pools (0: default).
    export_dir: write the step's XLA module there (xla_export, pretrain).
    xla_weights: the export stores the variables' values.
    xla_reference: the export stores TensorFlow's value of the step.
    fail_for_test, sleep_for_test: test hooks: the worker fails, or sleeps
      that many seconds, before importing TensorFlow.
  """
  kind: str
  pass_: str
  long_len: int
  global_len: int
  global_len_mode: str
  batch_size: int = 1
  tokens_per_sentence: int = 16
  pad_fraction: float = 0.0
  seed: int = 0
  dtype: str = "float32"
  xla: bool = False
  warmup: int = 2
  repeats: int = 5
  intra_op_threads: int = 0
  inter_op_threads: int = 0
  export_dir: Optional[str] = None
  xla_weights: bool = True
  xla_reference: bool = False
  fail_for_test: bool = False
  sleep_for_test: float = 0.0

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"kind {self.kind!r} is not one of {KINDS}")
    if self.pass_ not in PASSES:
      raise ValueError(f"pass {self.pass_!r} is not one of {PASSES}")
    if self.dtype not in DTYPES:
      raise ValueError(f"dtype {self.dtype!r} is not one of {DTYPES}")

  @property
  def training(self) -> bool:
    """Whether the step runs the model with training=True (dropout)."""
    return self.pass_ != "fwd"

  def to_dict(self) -> Dict[str, Any]:
    out = dataclasses.asdict(self)
    out["pass"] = out.pop("pass_")
    return out

  @classmethod
  def from_dict(cls, values: Dict[str, Any]) -> "RunSpec":
    values = dict(values)
    values["pass_"] = values.pop("pass")
    return cls(**values)


@dataclasses.dataclass(frozen=True)
class Spec:
  """One measurement: the run, and the two configs' fields it sets."""
  run: RunSpec
  etc_config: Dict[str, Any]
  execution: Dict[str, Any]

  def __post_init__(self):
    unknown = set(self.execution) - set(EXECUTION_AXES)
    if unknown:
      raise ValueError(f"execution fields {sorted(unknown)} are not swept "
                       f"by the benchmark ({list(EXECUTION_AXES)})")

  def replace_run(self, **changes) -> "Spec":
    return dataclasses.replace(self,
                               run=dataclasses.replace(self.run, **changes))

  def to_json(self) -> str:
    return json.dumps({"run": self.run.to_dict(),
                       "etc_config": self.etc_config,
                       "execution": self.execution}, sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> "Spec":
    values = json.loads(text)
    return cls(RunSpec.from_dict(values["run"]), values["etc_config"],
               values["execution"])

  def record_fields(self) -> Dict[str, Any]:
    """What a record keeps of the spec: the run's fields (without the test
    hooks, and the export's only with an export), `etc_config` and
    `execution`."""
    out = self.run.to_dict()
    for hook in ("fail_for_test", "sleep_for_test"):
      out.pop(hook)
    if self.run.export_dir is None:
      for key in ("export_dir", "xla_weights", "xla_reference"):
        out.pop(key)
    out["etc_config"] = dict(self.etc_config)
    out["execution"] = dict(self.execution)
    return out


def variant_name(spec: Spec) -> str:
  """A short name for everything but the length and the pass (one plot line
  each): the kind and attention path, residual attention, the precision,
  then what differs from the defaults (XLA, gradient checkpointing, the
  `ExecutionConfig` axes), and how G was chosen (not for the training
  steps, whose G is their task's)."""
  run, execution = spec.run, spec.execution
  impl = execution.get("att_implementation", "auto")
  parts = {"encoder": [impl], "matmul_floor": ["floor", impl],
           "finetune": ["wikihop"], "pretrain": ["pretrain"],
           "xla_export": ["export", impl]}[run.kind]
  parts += ["res" if spec.etc_config.get("residual_attention") else "nores",
            _DTYPE_TAGS[run.dtype]]
  if run.xla:
    parts.append("xla")
  if spec.etc_config.get("grad_checkpointing_period"):
    parts.append(f"ckpt{spec.etc_config['grad_checkpointing_period']}")
  for field, axis in EXECUTION_AXES.items():
    value = execution.get(field, axis.default)
    if field != "att_implementation" and value != axis.default:
      parts.append(axis.tag(value))
  if run.kind not in TRAINING_KINDS:
    parts.append(f"G={run.global_len_mode}")
  return "-".join(parts)
