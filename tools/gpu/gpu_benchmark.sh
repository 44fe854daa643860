#!/usr/bin/env bash
# The GPU benchmark of record, as one prepared run on a machine with jax and
# PyTorch but no TensorFlow (docs/benchmarks.md, "GPU").
#
#   # here (TensorFlow): export the modules, small (weights drawn there)
#   "$py" -m tools.bench.benchmark --mode=xla_export --export_dir=gpu_modules \
#       --num_layers=12 --dtypes=mixed_bfloat16 --passes=fwd,fwd_bwd \
#       --lengths=4096 --global_len=256 --batch_size=4 --xla_weights=off
#   # there: every module under each DIR, then dense SDPA (and, with --all,
#   # the sparse peers) at the same shapes; JSON lines under $OUT
#   bash tools/gpu/gpu_benchmark.sh DIR [DIR ...] [--all]
#
#   # with the fused kernels (attention_kernel=fused modules): build them
#   # here, carry gpu_kernels/ along; there the library is rebuilt against
#   # that jaxlib's FFI headers (the carried build if that fails), the
#   # kernels are checked against the NumPy reference and timed alone
#   # (tools.gpu.gpu_kernel_check), and every module runs with the handlers
#   "$py" -m tools.kernels.build_kernels --output_dir=gpu_kernels --dtypes=bfloat16
#   KERNELS_DIR=gpu_kernels CHECK_DTYPES=bfloat16 bash tools/gpu/gpu_benchmark.sh gpu_modules
#   (docs/kernels.md, "On a GPU": the modules to export, with and without
#   the fused kernels)
#
# The steps run in the order of what they are worth, so that a run cut
# short (RUN_BUDGET_S, or the caller's own limit: every step appends its
# records as it ends) keeps the most: on a GPU, a probe that XLA can keep
# its autotuning results for the run; the library; the kernels' check
# against the reference; dense SDPA; the modules, DIR by DIR in the order
# given, each DIR's modules (folders with a manifest.json, anywhere under
# it) by name; the kernels timed alone; the tile sweep; the profiles; on
# request, the counters and the memory checker; last, the summary
# (tools.gpu.gpu_summary: the records as a table, the fused modules against
# their XLA twins, the goals).
# Each step's seconds and exit status go to $OUT/steps.jsonl (a step the
# budget leaves no time for is recorded as skipped), its output to
# $OUT/run.log; the terminal gets a line per step and the summary.
#
# Environment: PYTHON (the interpreter; default: python or python3, the
# first that imports jax), DEVICE (the jax platform, default gpu), MODULE_TIMEOUT_S
# (seconds per step, default 300), RUN_BUDGET_S (seconds for the whole run,
# summary included; default 0, no limit; each step's limit is cut to what
# is left, and a step with less than MIN_STEP_S (default 30) left is
# skipped), CHECK_DTYPES (the input dtypes the kernel check covers: the
# ones the cubins were built for), TILE_DIRS (builds of other tile shapes
# to time, with KERNELS_DIR), PEER_SHAPES (L:G:batch,... for the peers),
# PEER_PASSES (fwd_bwd, fwd or both; default fwd_bwd), KERNELS_DIR (the
# fused kernels' build, above), PROFILE_MODULES (module folders, as
# DIR/name, to run once more, with `xla_runner --profile`: device time
# per kernel), NO_AUTOTUNE_CACHE (set: each process autotunes its own
# module, as a lone run does), NCU and SANITIZE (set: the steps below),
# SKIP_STEPS (a comma list of steps not to run, by their first word:
# e.g. kernel_check,peers in a second call after a first brought them
# back; library: use the carried build).
#
# What runs there, from the checkout (none of it imports TensorFlow):
# tools/__init__.py; tools/bench/: __init__.py, timing.py; tools/gpu/:
# __init__.py, xla_runner.py with hlo_text_stats.py (what a module
# writes), gpu_peers.py, gpu_summary.py; tools/kernels/: __init__.py,
# kernel_trace.py (the profiler's kernels), kernel_grids.py (today's
# tiles, read from etc_realformer/kernels/triton_attention.py); and with
# KERNELS_DIR tools/kernels/build_kernels.py, standalone.py,
# tools/gpu/gpu_kernel_check.py and etc_realformer/kernels/ (format.py,
# variants.py, build.py, ffi_library.py, reference.py, cc/) too; a copy
# of the harness without the checkout needs them all.
set -u
start=$SECONDS
# The interpreter that holds jax (PYTHON; else the first of python,
# python3 that imports it: a GPU image may name only python3).
py=${PYTHON:-}
if [ -z "$py" ]; then
  for candidate in python python3; do
    if command -v "$candidate" >/dev/null &&
        "$candidate" -c "import jax" 2>/dev/null; then
      py=$candidate
      break
    fi
  done
  py=${py:-python}
fi
# A partial copy fails here, once, not on every module.
"$py" -c "import tools.gpu.xla_runner, tools.gpu.gpu_summary" || {
  echo "tools.gpu.xla_runner does not import: ship tools/{__init__,bench/{__init__,timing},gpu/{__init__,xla_runner,hlo_text_stats,gpu_summary},kernels/{__init__,kernel_trace,kernel_grids}}.py" >&2
  exit 2
}
dirs=()
models=bert_sdpa
for arg in "$@"; do
  case $arg in
    --all) models=bigbird,longformer,bert_sdpa ;;
    *) dirs+=("$arg") ;;
  esac
done
[ ${#dirs[@]} -eq 0 ] && dirs=(gpu_modules)
out=${OUT:-.}
device=${DEVICE:-gpu}
budget=${RUN_BUDGET_S:-0}
# Kept out of the budget (seconds): the summary at the end, and the grace
# a step that ignores its TERM gets before it is killed.
summary_s=20

# The seconds the next step may take: MODULE_TIMEOUT_S, cut to what the
# budget has left.
step_limit() {
  local limit=${MODULE_TIMEOUT_S:-300}
  if [ "$budget" -gt 0 ]; then
    local left=$((budget - summary_s - (SECONDS - start)))
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  echo "$limit"
}

# step NAME COMMAND...: runs COMMAND under the step's limit and records it;
# returns its exit status (124: timed out; 125: skipped, no time left or
# named in SKIP_STEPS).
step() {
  local name=$1 limit t0 rc over
  shift
  case ",${SKIP_STEPS:-}," in
    *",${name%% *},"*)
      echo "skipped (SKIP_STEPS): $name" >&2
      printf '{"record_type": "step", "step": "%s", "skipped": true, "asked": true}\n' \
          "$name" >>"$out/steps.jsonl"
      return 125 ;;
  esac
  limit=$(step_limit)
  if [ "$limit" -lt "${MIN_STEP_S:-30}" ]; then
    echo "skipped (the run's budget is spent): $name" >&2
    printf '{"record_type": "step", "step": "%s", "skipped": true}\n' \
        "$name" >>"$out/steps.jsonl"
    return 125
  fi
  t0=$SECONDS
  # The steps' own output (JSON records, compiler logs) goes to run.log;
  # the terminal gets one line per step, then the summary.
  echo "== $name" >>"$out/run.log"
  timeout -k 5 "$limit" "$@" >>"$out/run.log" 2>&1
  rc=$?
  over=""
  [ $rc -eq 124 ] && over=" (over its $limit s)"
  echo "step $name: $((SECONDS - t0)) s, exit $rc$over" >&2
  printf '{"record_type": "step", "step": "%s", "seconds": %d, "exit": %d, "limit_s": %d}\n' \
      "$name" $((SECONDS - t0)) $rc "$limit" >>"$out/steps.jsonl"
  return $rc
}

# XLA's autotuning results, kept per fusion for the whole run: each step
# compiles in its own process, whose in-memory results end with it, and
# the modules share most fusions (the projections, the feed-forward, a
# shape's forward in its training step). A later module reuses what an
# earlier one measured on this card; the timings are the same, the
# compiles shorter. Only if this jaxlib knows the flag: an unknown flag in
# XLA_FLAGS aborts every process.
if [ "$device" != cpu ] && [ -z "${NO_AUTOTUNE_CACHE:-}" ]; then
  autotune="--xla_gpu_per_fusion_autotune_cache_dir=$(mktemp -d)"
  if step autotune_cache env XLA_FLAGS="${XLA_FLAGS:-} $autotune" "$py" -c \
      "import jax; jax.jit(lambda x: x + 1)(1.0).block_until_ready()"; then
    export XLA_FLAGS="${XLA_FLAGS:-} $autotune"
    echo "XLA autotuning: cached per fusion for the run" >&2
  else
    echo "XLA autotuning: not cached (this jaxlib refused $autotune)" >&2
  fi
fi

ffi=()
if [ -n "${KERNELS_DIR:-}" ]; then
  built=$(mktemp -d)
  cp -r "$KERNELS_DIR/cubins" "$built/"
  include=$("$py" -c "import jax.ffi; print(jax.ffi.include_dir())" 2>/dev/null)
  if [ -n "$include" ] && step library "$py" -m tools.kernels.build_kernels \
      --output_dir="$built" --no_cubins --ffi_include="$include"; then
    echo "fused kernels: library rebuilt against jaxlib's FFI headers" >&2
  else
    echo "fused kernels: using the carried library" >&2
    cp "$KERNELS_DIR/libetc_attention_ffi.so" "$built/"
  fi
  library="$built/libetc_attention_ffi.so"
  ffi=(--ffi_library="$library")
  step kernel_check "$py" -m tools.gpu.gpu_kernel_check --library="$library" \
      --device="$device" --dtypes="${CHECK_DTYPES:-float32,bfloat16,float16}" \
      --no_timing --output_jsonl="$out/kernels.jsonl"
fi
step peers "$py" -m tools.gpu.gpu_peers \
    --shapes="${PEER_SHAPES:-4096:256:4,16384:1024:1,16384:256:1}" \
    --models="$models" --passes="${PEER_PASSES:-fwd_bwd}" --repeats=10 --warmup=3 \
    --output_jsonl="$out/peers.jsonl"
# A module that does not compile or fit in time is skipped, not the sweep.
# Each DIR's modules: the folders under it that hold a manifest, by name.
for dir in "${dirs[@]}"; do
  modules=$(find "$dir" -name manifest.json -printf '%h\n' | sort)
  [ -n "$modules" ] || echo "no exported module under $dir" >&2
  for module in $modules; do
    step "module $module" "$py" -m tools.gpu.xla_runner \
        --module_dir="$module/" --device="$device" --repeats=10 \
        --warmup=3 --hlo_stats --output_jsonl="$out/xla_runs.jsonl" "${ffi[@]}"
  done
done
# The kernels alone at the benchmark's shapes: for a GPU (the host loops
# take minutes), after the modules (the goals are the modules').
if [ -n "${KERNELS_DIR:-}" ] && [ "$device" != cpu ]; then
  step kernel_timing "$py" -m tools.gpu.gpu_kernel_check --library="$library" \
      --device="$device" --dtypes=bfloat16 --no_check \
      --output_jsonl="$out/kernels.jsonl"
  # Tile sweep: each folder a build of other tile shapes (cubins only),
  # timed alone with the same library (docs/kernels.md, "Building").
  for tiles in ${TILE_DIRS:-}; do
    step "tiles $tiles" env ETC_KERNELS_CUBIN_DIR="$tiles/cubins" \
        "$py" -m tools.gpu.gpu_kernel_check --library="$library" \
        --device="$device" --dtypes=bfloat16 --no_check \
        --output_jsonl="$out/tiles.jsonl"
  done
fi
for module in ${PROFILE_MODULES:-}; do
  step "profile $module" "$py" -m tools.gpu.xla_runner \
      --module_dir="$module" --device="$device" --repeats=3 \
      --warmup=2 --profile --profile_runs=3 --output_jsonl="$out/profiles.jsonl" "${ffi[@]}"
done
# On request, last (each a minute or more; the output goes to run.log):
# NCU=1, Nsight Compute's counters (clocks left alone) of the first
# kernels the timing launches: the long branch's forward and backward at
# the benchmark's shape, streams and dropout on, what bounds a kernel;
# SANITIZE=1, the kernel check under compute-sanitizer's memcheck, every
# buffer its own allocation (in jax's pool a stray access stays inside
# the pool, unseen).
if [ -n "${KERNELS_DIR:-}" ] && [ "$device" != cpu ]; then
  if [ -n "${NCU:-}" ]; then
    step ncu ncu --clock-control none --kernel-name regex:branch_ \
        --launch-count 8 --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section MemoryWorkloadAnalysis \
        --section WarpStateStats --csv --page details \
        "$py" -m tools.gpu.gpu_kernel_check --library="$library" \
        --device="$device" --dtypes=bfloat16 --no_check --repeats=1 \
        --warmup=0
  fi
  if [ -n "${SANITIZE:-}" ]; then
    step sanitize env XLA_PYTHON_CLIENT_ALLOCATOR=platform \
        compute-sanitizer --tool memcheck --error-exitcode 1 \
        "$py" -m tools.gpu.gpu_kernel_check --library="$library" \
        --device="$device" --dtypes="${CHECK_DTYPES:-bfloat16}" --no_timing
  fi
fi
# The kernels' issue floors (tools/kernels/kernel_sass.py, written by
# tools/gpu/gpu_prepare.sh beside the cubins), for the timings to stand beside.
"$py" -m tools.gpu.gpu_summary ${KERNELS_DIR:+"$KERNELS_DIR/floors.jsonl"} \
    "$out/kernels.jsonl" "$out/tiles.jsonl" \
    "$out/xla_runs.jsonl" "$out/peers.jsonl" "$out/steps.jsonl" \
    | tee "$out/summary.txt"
