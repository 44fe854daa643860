"""The benchmark of record: encoder time and peak memory against length.

    python -m tools.bench.benchmark --lengths=1024,2048,4096,8192,16384 \
        --impls=sparse --residual=on,off --dtypes=float32,mixed_bfloat16 \
        --passes=fwd,fwd_bwd --output_jsonl=bench.jsonl --plot=bench.png

    python -m tools.bench.benchmark --mode=finetune \
        --finetune_dtypes=float32,mixed_bfloat16 --output_jsonl=bench.jsonl

Every measurement (one length, one variant, one pass) runs in a process of its
own (`tools/bench/benchmark_worker.py`), so that its peak resident memory
(VmHWM) belongs to it alone. In that process the step runs inside `tf.function`
(`--xla=on` adds `jit_compile`), is called `--warmup` times (the first call,
trace + compile, is recorded as `first_call_s`), then `--repeats` times, each
timed alone; the record keeps every time, the median and the minimum.

* `fwd`: `model(features, training=False)` (no dropout).
* `fwd_bwd`: `training=True` with the config's dropout (0.1), a scalar loss
  (mean square of both outputs) and its gradient w.r.t. every trainable
  variable (no optimizer update, no loss scaling).
* `--mode=matmul_floor`: the same steps, but only their matrix products are
  timed (every MatMul / BatchMatMul of the traced graph, on random inputs of
  its shapes): the floor for any encoder doing those products here, e.g. the
  original ETC, whose products are the same. A goal below it cannot be met
  on this machine by work outside the products.
* `--mode=finetune`: a WikiHop training step (encoder + head + loss + AdamW
  update) at 4096/430 on WikiHop-shaped random features; examples/s.
* `--mode=pretrain`: a pre-training step (encoder + MLM head + CPC head
  with its second encoder pass + 0.8/0.2 loss + LAMB update, the
  `tasks.pretrain` model) at L = `--finetune_long_len`, one summary token
  per sentence of about `--tokens_per_sentence` pieces (G = L /
  `--global_ratio`), masks of `gin/tasks/pretrain.gin`; examples/s and
  tokens/s. With `--export_dir`, the step's gradient (loss and every
  weight's gradient; the LAMB update left out, elementwise over the
  weights) is also written as an XLA module for `tools.gpu.xla_runner`.
* `--mode=xla_export --export_dir=DIR`: the encoder step of each spec traced
  with `jit_compile`, written as its XLA module (serialized HLO), inputs and
  argument list to `DIR/<variant>-L<L>-<pass>/`, for `tools.gpu.xla_runner`
  to compile and time with jax/jaxlib alone (e.g. on a GPU machine without
  TensorFlow). Nothing is timed here.

A run that exceeds `--timeout_per_run` or `--max_rss_gib` (the parent polls
the child's RSS), or that dies (e.g. the kernel's OOM killer) or raises, is
killed if needed and recorded with its `status`; the sweep goes on.

Each measurement is a `tools.bench.benchmark_spec.Spec`: the run's own settings
(kind, pass, lengths, batch, precision, XLA, inputs, protocol), the
`EtcConfig` fields the flags set and the `ExecutionConfig` fields they
sweep. Its variant name (one plot line) says what differs from the
defaults, e.g. `sparse-res-bf16-xla-recatt-G=256`.

Output: a table on stdout, one JSON object per measurement appended to
`--output_jsonl` (the run's fields at the top level, `etc_config` and
`execution`, the measured fields, the machine and the command), a log-log
PNG (`--plot`), and the log-log slope of time and memory between
consecutive lengths per variant (see `tools/bench/benchmark_plot.py`, which also
re-plots a JSONL file on its own, earlier records included). This file
imports no TensorFlow.
"""

import argparse
import datetime
import itertools
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from tools.bench import benchmark_plot
from tools.bench import benchmark_spec
from tools.bench.benchmark_spec import RunSpec, Spec, variant_name

# 2: the spec's EtcConfig and ExecutionConfig fields under `etc_config` and
# `execution` (1: `model`, `impl`, `residual`, ... at the top level, and a
# `dropout` that no run read). Both plot alike (`tools.bench.benchmark_plot`).
SCHEMA_VERSION = 2
GIB = float(1 << 30)
DTYPES = benchmark_spec.DTYPES
IMPLS = benchmark_spec.ATT_IMPLEMENTATIONS
# The encoder's passes (the training modes run "train_step").
PASSES = ("fwd", "fwd_bwd")
# Lengths the benchmark of record is meant for (others run, with a note).
RECORD_LENGTHS = (1024, 16384)
RECORD_MIN_REPEATS = 5
_POLL_S = 0.1


# -------------------------------------------------------------- flag parsing
def _csv(value: str) -> List[str]:
  return [v.strip() for v in value.split(",") if v.strip()]


def _csv_ints(value: str) -> List[int]:
  return [int(v) for v in _csv(value)]


def _on_off(value: str) -> List[bool]:
  table = {"on": True, "true": True, "1": True, "off": False, "false": False,
           "0": False}
  out = []
  for v in _csv(value):
    if v.lower() not in table:
      raise argparse.ArgumentTypeError(f"expected on/off values, got {v!r}")
    out.append(table[v.lower()])
  return out


def _choices(allowed: Sequence[str]):
  def parse(value: str) -> List[str]:
    values = _csv(value)
    bad = [v for v in values if v not in allowed]
    if bad:
      raise argparse.ArgumentTypeError(f"{bad} not in {list(allowed)}")
    return values
  return parse


def _chunk_lens(value: str) -> List[Any]:
  """Chunk lengths: integers, -1 or "auto" for ExecutionConfig's "auto"."""
  return ["auto" if v in ("-1", "auto") else int(v) for v in _csv(value)]


# The flags of the swept ExecutionConfig fields besides the attention path
# (--impls): each named as its field, a comma list of values (default: the
# field's default, `benchmark_spec.EXECUTION_AXES`), crossed in this order.
_EXECUTION_FLAGS: Dict[str, Any] = {
    "recompute_attention": (_on_off, "on, off or both"),
    "attention_chunk_len": (
        _chunk_lens, "queries per chunk of the sparse attention core; 0 = "
        "unchunked; -1 or auto = the default, 'auto'"),
    "recompute_residual_streams": (_on_off, "on, off or both"),
    "softmax_dtype": (_choices(benchmark_spec.SOFTMAX_DTYPES),
                      "mixed precision: float32, compute or both"),
    "stream_dtype": (_choices(benchmark_spec.STREAM_DTYPES),
                     "mixed precision: float32, compute or both"),
    "dropout_rng": (_choices(benchmark_spec.DROPOUT_RNGS),
                    "philox, hash or both"),
    "attention_kernel": (_choices(benchmark_spec.ATTENTION_KERNELS),
                         "xla, fused (custom calls under --xla) or both"),
}


def _mem_total_gib() -> Optional[float]:
  try:
    with open("/proc/meminfo", "r") as f:
      for line in f:
        if line.startswith("MemTotal:"):
          return int(line.split()[1]) * 1024 / GIB
  except OSError:
    pass
  return None


def _mode_flags(a: Callable[..., Any]) -> None:
  a("--mode", choices=("encoder", "matmul_floor", "finetune", "pretrain",
                      "xla_export"),
    default="encoder",
    help="encoder: the step; matmul_floor: the same step's matrix products "
    "alone; finetune: a WikiHop training step; pretrain: a pre-training "
    "step (MLM + CPC); xla_export: the step's XLA module for "
    "tools.gpu.xla_runner")
  a("--export_dir", default=None,
    help="--mode=xla_export (required) or --mode=pretrain (optional): where "
    "each spec's module directory goes")
  a("--xla_reference", type=_on_off, default=[False],
    help="--mode=xla_export: also run the step once in TensorFlow (with XLA) "
    "and store its value, for the runner's check")
  a("--xla_weights", type=_on_off, default=[True],
    help="--mode=xla_export: store the variables' values (off: the runner "
    "draws random ones of their shapes; small exports for timing)")


def _axis_flags(a: Callable[..., Any]) -> None:
  """The swept axes: lengths, precision, the attention path and the
  ExecutionConfig fields."""
  a("--lengths", type=_csv_ints, default=[1024, 2048, 4096, 8192, 16384],
    help="long lengths L (comma list)")
  a("--global_len", default="ratio",
    help="'ratio' (G = L / --global_ratio, sentence-level global tokens) or "
    "a fixed G, e.g. 256")
  a("--global_ratio", type=int, default=16)
  a("--impls", type=_choices(IMPLS), default=["sparse"],
    help="attention paths (ExecutionConfig.att_implementation): sparse, full")
  a("--residual", type=_on_off, default=[True],
    help="residual (RealFormer) attention: on, off")
  a("--dtypes", type=_choices(DTYPES), default=["float32"])
  a("--xla", type=_on_off, default=[False], help="jit_compile: on, off")
  a("--grad_checkpointing", type=_csv_ints, default=[0],
    help="EtcConfig.grad_checkpointing_period values (0 = off)")
  for field, (parse, values) in _EXECUTION_FLAGS.items():
    a(f"--{field}", type=parse,
      default=[benchmark_spec.EXECUTION_AXES[field].default],
      help=f"ExecutionConfig.{field}: {values}")
  a("--passes", type=_choices(PASSES), default=list(PASSES))


def _model_flags(a: Callable[..., Any]) -> None:
  """The EtcConfig sizes, and the random inputs."""
  a("--num_layers", type=int, default=2)
  a("--batch_size", type=int, default=1)
  a("--hidden_size", type=int, default=768)
  a("--num_heads", type=int, default=12)
  a("--intermediate_size", type=int, default=3072)
  a("--local_radius", type=int, default=84)
  a("--relative_pos_max_distance", type=int, default=12)
  a("--relative_vocab_size", type=int, default=32)
  a("--vocab_size", type=int, default=30522)
  a("--tokens_per_sentence", type=int, default=16,
    help="long tokens per sentence (sentence_ids = i // this, clipped)")
  a("--pad_fraction", type=float, default=0.0,
    help="fraction of each row's long tokens that are padding")
  a("--seed", type=int, default=0)


def _protocol_flags(a: Callable[..., Any]) -> None:
  """Timing, the guards, and the training modes' sizes."""
  a("--repeats", type=int, default=RECORD_MIN_REPEATS,
    help="timed calls after warm-up (median of these)")
  a("--warmup", type=int, default=2,
    help="untimed calls first (the first traces and compiles)")
  a("--timeout_per_run", type=float, default=1800.0,
    help="seconds before a measurement process is killed")
  a("--max_rss_gib", type=float, default=None,
    help="kill a measurement whose RSS exceeds this (default: 85%% of RAM)")
  a("--intra_op_threads", type=int, default=0, help="0 = TF default")
  a("--inter_op_threads", type=int, default=0, help="0 = TF default")
  a("--finetune_dtypes", type=_choices(DTYPES),
    default=["float32", "mixed_bfloat16"],
    help="--mode=finetune and --mode=pretrain: precisions")
  a("--finetune_long_len", type=int, default=4096,
    help="--mode=finetune and --mode=pretrain: L")
  a("--finetune_global_len", type=int, default=430)
  a("--finetune_layers", type=int, default=None,
    help="encoder layers for --mode=finetune / pretrain (default: "
    "--num_layers)")


def _output_flags(a: Callable[..., Any]) -> None:
  a("--output_jsonl", default=None, help="append one JSON line per run")
  a("--plot", default=None, help="write a log-log PNG here")
  a("--label", default="", help="free text stored in every record")
  a("--slope_target", type=float, default=1.1,
    help="max time slope between 2048 and 16384 with G fixed")
  # Test hooks (hidden): make chosen runs fail or hang.
  a("--_fail_lengths", type=_csv_ints, default=[], help=argparse.SUPPRESS)
  a("--_sleep_lengths", type=_csv_ints, default=[], help=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
  """The command-line flags (comma lists for every axis)."""
  p = argparse.ArgumentParser(
      prog="python -m tools.bench.benchmark",
      description="ETC-RealFormer encoder benchmark (see module docstring).")
  for add in (_mode_flags, _axis_flags, _model_flags, _protocol_flags,
              _output_flags):
    add(p.add_argument)
  return p


# ------------------------------------------------------------------- machine
def machine_info() -> Dict[str, Any]:
  """Host facts stored with every record (timings depend on them)."""
  cpu = platform.processor() or ""
  try:
    with open("/proc/cpuinfo", "r") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  commit = None
  try:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True,
        text=True, timeout=10, check=False).stdout.strip() or None
  except (OSError, subprocess.SubprocessError):
    pass
  dirty = None
  try:
    # Library edits not yet committed change what is measured: say so.
    dirty = bool(subprocess.run(
        ["git", "status", "--porcelain", "--", "etc_realformer", "tasks"],
        capture_output=True, text=True, timeout=10,
        check=False).stdout.strip())
  except (OSError, subprocess.SubprocessError):
    pass
  return {"hostname": socket.gethostname(), "nproc": os.cpu_count(),
          "cpu_model": cpu, "mem_total_gib": _mem_total_gib(),
          "python": platform.python_version(), "git_commit": commit,
          "library_uncommitted_changes": dirty}


def _child_rss_gib(pid: int) -> Optional[float]:
  try:
    with open(f"/proc/{pid}/status", "r") as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) * 1024 / GIB
  except (OSError, ValueError):
    pass
  return None


# -------------------------------------------------------------------- specs
def _global_len(args: argparse.Namespace, long_len: int) -> int:
  if args.global_len == "ratio":
    return max(1, long_len // args.global_ratio)
  return int(args.global_len)


def _global_len_mode(args: argparse.Namespace) -> str:
  return (f"L/{args.global_ratio}" if args.global_len == "ratio"
          else str(int(args.global_len)))


def _etc_config(args: argparse.Namespace, num_layers: int, residual: bool,
                period: int) -> Dict[str, Any]:
  """The EtcConfig fields of a spec (the rest: EtcConfig's defaults)."""
  return {"vocab_size": args.vocab_size, "hidden_size": args.hidden_size,
          "num_hidden_layers": num_layers,
          "num_attention_heads": args.num_heads,
          "intermediate_size": args.intermediate_size,
          "local_radius": args.local_radius,
          "relative_pos_max_distance": args.relative_pos_max_distance,
          "relative_vocab_size": args.relative_vocab_size,
          "residual_attention": residual,
          "grad_checkpointing_period": period}


def _run_spec(args: argparse.Namespace, **fields) -> RunSpec:
  """A RunSpec with the protocol of the flags (seed, warm-up, repeats,
  threads, the test hooks at their lengths)."""
  long_len = fields["long_len"]
  return RunSpec(
      seed=args.seed, warmup=args.warmup, repeats=args.repeats,
      batch_size=args.batch_size,
      tokens_per_sentence=args.tokens_per_sentence,
      intra_op_threads=args.intra_op_threads,
      inter_op_threads=args.inter_op_threads,
      fail_for_test=long_len in args._fail_lengths,  # pylint: disable=protected-access
      sleep_for_test=3600 if long_len in args._sleep_lengths else 0,  # pylint: disable=protected-access
      **fields)


def encoder_specs(args: argparse.Namespace) -> Iterator[Spec]:
  """One spec per (variant, length, pass), lengths innermost per variant
  (kind "encoder", or "matmul_floor" / "xla_export" with that --mode)."""
  kind = args.mode if args.mode in ("matmul_floor", "xla_export") else (
      "encoder")
  fields = list(_EXECUTION_FLAGS)
  for impl, residual, dtype, xla, period, *values in itertools.product(
      args.impls, args.residual, args.dtypes, args.xla,
      args.grad_checkpointing, *[getattr(args, f) for f in fields]):
    execution = {"att_implementation": impl, **dict(zip(fields, values))}
    etc_config = _etc_config(args, args.num_layers, residual, period)
    for pass_ in args.passes:
      for long_len in args.lengths:
        run = _run_spec(args, kind=kind, pass_=pass_, long_len=long_len,
                        global_len=_global_len(args, long_len),
                        global_len_mode=_global_len_mode(args),
                        dtype=dtype, xla=xla,
                        pad_fraction=args.pad_fraction)
        yield Spec(run, etc_config, execution)


def training_specs(args: argparse.Namespace) -> Iterator[Spec]:
  """One spec per variant of a training step (--mode=finetune: WikiHop at
  L / --finetune_global_len; --mode=pretrain: G = one token per sentence,
  L / --global_ratio); the attention path is "auto"."""
  layers = args.finetune_layers or args.num_layers
  long_len = args.finetune_long_len
  if args.mode == "pretrain":
    global_len = _global_len(args, long_len)
    g_mode = _global_len_mode(args)
  else:
    global_len = args.finetune_global_len
    g_mode = str(global_len)
  for residual, dtype, xla, period in itertools.product(
      args.residual, args.finetune_dtypes, args.xla,
      args.grad_checkpointing):
    spec = Spec(
        _run_spec(args, kind=args.mode, pass_="train_step",
                  long_len=long_len, global_len=global_len,
                  global_len_mode=g_mode, dtype=dtype, xla=xla),
        _etc_config(args, layers, residual, period),
        {"att_implementation": "auto"})
    if args.mode == "pretrain" and args.export_dir:
      spec = spec.replace_run(
          export_dir=os.path.abspath(os.path.join(
              args.export_dir,
              f"{variant_name(spec)}-L{long_len}-train_step")),
          xla_weights=args.xla_weights[0],
          xla_reference=args.xla_reference[0])
    yield spec


def export_specs(args: argparse.Namespace) -> List[Spec]:
  """--mode=xla_export: the encoder specs, with XLA on (the module is the
  jit_compile one), each exported to its own directory."""
  if not args.export_dir:
    raise SystemExit("--mode=xla_export needs --export_dir")
  specs = []
  for spec in encoder_specs(args):
    spec = spec.replace_run(xla=True)
    specs.append(spec.replace_run(
        export_dir=os.path.abspath(os.path.join(
            args.export_dir,
            f"{variant_name(spec).replace('/', '_')}-L{spec.run.long_len}-"
            f"{spec.run.pass_}")),
        xla_reference=args.xla_reference[0],
        xla_weights=args.xla_weights[0]))
  return specs


# --------------------------------------------------------------------- runs
def run_one(spec: Spec, timeout_s: float,
            max_rss_gib: Optional[float]) -> Dict[str, Any]:
  """Runs one measurement in a fresh process; never raises for its failure.

  Returns:
    The worker's fields plus `status` ('ok', 'timeout', 'over_memory',
    'killed' (a signal we did not send, e.g. the OOM killer) or 'error'),
    `error` (a stderr tail) when not ok, `wall_s` and `max_polled_rss_gib`
    (the largest child RSS the parent saw; a lower bound of the peak).
  """
  with tempfile.TemporaryDirectory(prefix="etc_bench_") as tmp:
    result_path = os.path.join(tmp, "result.json")
    cmd = [sys.executable, "-m", "tools.bench.benchmark_worker",
           "--spec", spec.to_json(), "--result", result_path]
    out_path = os.path.join(tmp, "stdout_stderr.txt")
    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [repo_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    start = time.perf_counter()
    status, max_rss = None, 0.0
    with open(out_path, "wb") as log:
      proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                              cwd=repo_root, env=env)
      while proc.poll() is None:
        rss = _child_rss_gib(proc.pid)
        if rss is not None:
          max_rss = max(max_rss, rss)
        if max_rss_gib is not None and rss is not None and rss > max_rss_gib:
          status = "over_memory"
        elif time.perf_counter() - start > timeout_s:
          status = "timeout"
        if status:
          proc.send_signal(signal.SIGKILL)
          proc.wait()
          break
        time.sleep(_POLL_S)
    wall = time.perf_counter() - start
    with open(out_path, "rb") as f:
      tail = f.read()[-3000:].decode("utf-8", "replace")
    record: Dict[str, Any] = {}
    if status is None:
      if proc.returncode == 0 and os.path.exists(result_path):
        with open(result_path, "r") as f:
          record = json.load(f)
        status = "ok"
      elif proc.returncode is not None and proc.returncode < 0:
        status = "killed"
      else:
        status = "error"
    record.update(status=status, returncode=proc.returncode,
                  wall_s=round(wall, 3), max_polled_rss_gib=max_rss)
    if status != "ok":
      why = {"timeout": f"killed after {timeout_s:g} s (--timeout_per_run)",
             "over_memory": f"killed: RSS above {max_rss_gib:g} GiB "
                            "(--max_rss_gib)",
             "killed": f"died of signal {-(proc.returncode or 0)} (OOM "
                       "killer?)"}.get(status, "worker failed")
      lines = [l for l in tail.splitlines() if l.strip()]
      record["error_summary"] = why + (f": {lines[-1].strip()}"
                                       if status == "error" and lines else "")
      record["error"] = why + "\n" + tail
    return record


def make_record(spec: Spec, result: Dict[str, Any],
                args: argparse.Namespace, machine: Dict[str, Any],
                load_avg: Optional[List[float]] = None) -> Dict[str, Any]:
  """The JSONL record: spec (`Spec.record_fields`), outcome and context of
  one measurement (`load_avg`: the load before it ran)."""
  record = {"schema_version": SCHEMA_VERSION,
            "record_type": spec.run.kind,
            "timestamp": datetime.datetime.now(
                datetime.timezone.utc).isoformat(timespec="seconds"),
            "variant": variant_name(spec), "label": args.label}
  record.update(spec.record_fields())
  if spec.run.fail_for_test or spec.run.sleep_for_test:
    record["injected_failure"] = True  # A test hook, not a real outcome.
  record.update(result)
  record["meets_record_protocol"] = (
      spec.run.repeats >= RECORD_MIN_REPEATS and
      RECORD_LENGTHS[0] <= spec.run.long_len <= RECORD_LENGTHS[1])
  record["load_avg_before"] = load_avg
  record["machine"] = machine
  record["command"] = " ".join(
      shlex.quote(a)
      for a in ["python", "-m", "tools.bench.benchmark"] + args.argv)
  return record


# -------------------------------------------------------------------- table
def _fmt(value: Optional[float], digits: int = 3) -> str:
  return "-" if value is None else f"{value:.{digits}f}"


TABLE_HEADER = (f"{'variant':<34} {'pass':<10} {'L':>6} {'G':>5} "
                f"{'median_s':>9} {'min_s':>9} {'peak_GiB':>8} "
                f"{'base_GiB':>8}  status")


def table_row(r: Dict[str, Any]) -> str:
  return (f"{r['variant']:<34} {r['pass']:<10} {r['long_len']:>6} "
          f"{r['global_len']:>5} {_fmt(r.get('median_s')):>9} "
          f"{_fmt(r.get('min_s')):>9} {_fmt(r.get('peak_rss_gib'), 2):>8} "
          f"{_fmt(r.get('baseline_rss_gib'), 2):>8}  {r['status']}")


def summary_line(r: Dict[str, Any]) -> Optional[str]:
  """The mode's one-line summary of a successful record (None for encoder
  records: the table says it all)."""
  if r["status"] != "ok":
    return None
  if r["record_type"] in ("finetune", "pretrain"):
    # The training modes: rate (batch and sizes); optimizer. Pre-training
    # adds its token rate and what an example holds.
    pretrain = r["record_type"] == "pretrain"
    rate = f"{r['examples_per_s']:.3f} examples/s"
    sizes = f"batch {r['batch_size']}, L={r['long_len']}, G={r['global_len']}"
    if pretrain:
      rate += f", {r['tokens_per_s']:.0f} tokens/s"
      sizes += (f", {r['real_long_tokens']} real long tokens, "
                f"{r['mlm_predictions']} MLM predictions, "
                f"{r['cpc_sentences']} CPC sentences per example")
    line = (f"# {r['record_type']} {r['variant']}: {rate} ({sizes}); "
            f"optimizer: {r['optimizer']}")
    if pretrain and r.get("export_dir"):
      line += f"; XLA module -> {r['export_dir']}"
    return line
  if r["record_type"] == "xla_export":
    return (f"# xla_export {r['variant']} {r['pass']} L={r['long_len']}: "
            f"{r['num_arguments']} arguments, {r['hlo_bytes']} bytes of HLO "
            f"-> {r['export_dir']}")
  if r["record_type"] == "matmul_floor":
    return (f"# matmul floor {r['variant']} {r['pass']} L={r['long_len']}: "
            f"{r['matmul_count']} products, {r['matmul_gflop']:.1f} GFLOP "
            f"in {r['median_s']:.3f} s ({r['matmul_gflop_per_s']:.0f} "
            f"GFLOP/s); not timed: {r['matmul_skipped_ops'] or 'none'}")
  return None


def _load_avg() -> Optional[List[float]]:
  try:
    return [round(x, 2) for x in os.getloadavg()]
  except OSError:
    return None


def main(argv: Optional[List[str]] = None) -> List[Dict[str, Any]]:
  """Runs the sweep; returns the records (also printed / written)."""
  argv = list(sys.argv[1:] if argv is None else argv)
  args = build_parser().parse_args(argv)
  args.argv = argv
  if args.repeats < 1 or args.warmup < 1:
    raise SystemExit("--repeats and --warmup must be >= 1")
  max_rss = args.max_rss_gib
  if max_rss is None and _mem_total_gib():
    max_rss = 0.85 * _mem_total_gib()
  machine = machine_info()
  if args.mode in benchmark_spec.TRAINING_KINDS:
    specs = list(training_specs(args))
  elif args.mode == "xla_export":
    specs = export_specs(args)
  else:
    specs = list(encoder_specs(args))
  print(f"# {len(specs)} measurements, each in its own process; "
        f"median of {args.repeats} calls after {args.warmup} warm-up; "
        f"fwd: training=False (no dropout); fwd_bwd / train_step: "
        f"training=True (EtcConfig's dropout); guard {_fmt(max_rss, 1)} GiB, "
        f"timeout {args.timeout_per_run:g} s", flush=True)
  if args.repeats < RECORD_MIN_REPEATS:
    print(f"# note: --repeats={args.repeats} < {RECORD_MIN_REPEATS}: not a "
          "record measurement", flush=True)
  print(TABLE_HEADER, flush=True)
  records = []
  for spec in specs:
    load_avg = _load_avg()
    result = run_one(spec, args.timeout_per_run, max_rss)
    record = make_record(spec, result, args, machine, load_avg)
    records.append(record)
    print(table_row(record), flush=True)
    if record["status"] != "ok":
      print("  " + record["error_summary"], flush=True)
    if args.output_jsonl:
      with open(args.output_jsonl, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
  for r in records:
    line = summary_line(r)
    if line:
      print(line, flush=True)
  print(benchmark_plot.slope_summary(records, args.slope_target), flush=True)
  if args.plot:
    benchmark_plot.plot(records, args.plot)
    print(f"# plot: {args.plot}", flush=True)
  return records


if __name__ == "__main__":
  main()
