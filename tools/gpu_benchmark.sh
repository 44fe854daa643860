#!/usr/bin/env bash
# The GPU benchmark of record, as one prepared run on a machine with jax and
# PyTorch but no TensorFlow (docs/benchmarks.md, "GPU").
#
#   # here (TensorFlow): export the modules, small (weights drawn there)
#   python -m tools.benchmark --mode=xla_export --export_dir=gpu_modules \
#       --num_layers=12 --dtypes=mixed_bfloat16 --passes=fwd,fwd_bwd \
#       --lengths=4096 --global_len=256 --batch_size=4 --xla_weights=off
#   # there: every module under DIR, then dense SDPA (and, with --all, the
#   # sparse peers) at the same shapes; JSON lines under $OUT
#   bash tools/gpu_benchmark.sh gpu_modules [--all]
#
#   # with the fused kernels (attention_kernel=fused modules): build them
#   # here, carry gpu_kernels/ along; there the library is rebuilt against
#   # that jaxlib's FFI headers (the carried build if that fails), the
#   # kernels are checked against the NumPy reference and timed alone
#   # (tools.gpu_kernel_check), and every module runs with the handlers
#   python -m tools.build_kernels --output_dir=gpu_kernels --dtypes=bfloat16
#   KERNELS_DIR=gpu_kernels CHECK_DTYPES=bfloat16 bash tools/gpu_benchmark.sh gpu_modules
#   (docs/kernels.md, "On a GPU": the modules to export, with and without
#   the fused kernels)
#
# Environment: DEVICE (the jax platform, default gpu), MODULE_TIMEOUT_S
# (seconds per module, default 300), CHECK_DTYPES (the input dtypes the
# kernel check covers: the ones the cubins were built for), TILE_DIRS
# (builds of other tile shapes to time, with KERNELS_DIR), PEER_SHAPES (L:G:batch,... for the
# peers), PEER_PASSES (fwd_bwd, fwd or both; default fwd_bwd), KERNELS_DIR
# (the fused kernels' build, above), PROFILE_MODULES (names of module folders under DIR to run once
# more, last, with `xla_runner --profile`: device time per kernel).
#
# What runs there, from the checkout (none of it imports TensorFlow):
# tools/__init__.py, timing.py, xla_runner.py with hlo_text_stats.py (what
# a module writes) and kernel_trace.py (the profiler's kernels), and
# gpu_peers.py; a copy of the harness without the checkout needs them all.
set -u
# A partial copy fails here, once, not on every module.
python -c "import tools.xla_runner" || {
  echo "tools.xla_runner does not import: ship tools/{__init__,timing,xla_runner,hlo_text_stats,kernel_trace}.py" >&2
  exit 2
}
dir=${1:-gpu_modules}
models=bert_sdpa
if [ "${2:-}" = "--all" ]; then models=bigbird,longformer,bert_sdpa; fi
out=${OUT:-.}
ffi=()
if [ -n "${KERNELS_DIR:-}" ]; then
  built=$(mktemp -d)
  cp -r "$KERNELS_DIR/cubins" "$built/"
  include=$(python -c "import jax.ffi; print(jax.ffi.include_dir())" 2>/dev/null)
  if [ -n "$include" ] && python -m tools.build_kernels --output_dir="$built" \
      --no_cubins --ffi_include="$include" >&2; then
    echo "fused kernels: library rebuilt against jaxlib's FFI headers" >&2
  else
    echo "fused kernels: using the carried library" >&2
    cp "$KERNELS_DIR/libetc_attention_ffi.so" "$built/"
  fi
  ffi=(--ffi_library="$built/libetc_attention_ffi.so")
  # The timing at the benchmark's shape is for a GPU (the host loops take
  # minutes there).
  check_timing=(); [ "${DEVICE:-gpu}" = cpu ] && check_timing=(--no_timing)
  timeout "${MODULE_TIMEOUT_S:-300}" python -m tools.gpu_kernel_check \
      --library="$built/libetc_attention_ffi.so" --device="${DEVICE:-gpu}" \
      --dtypes="${CHECK_DTYPES:-float32,bfloat16,float16}" "${check_timing[@]}" \
      --output_jsonl="$out/kernels.jsonl" \
      || echo "gpu_kernel_check failed (see $out/kernels.jsonl)" >&2
  # Tile sweep: each folder a build of other tile shapes (cubins only),
  # timed alone with the same library (docs/kernels.md, "Tiles").
  for tiles in ${TILE_DIRS:-}; do
    ETC_KERNELS_CUBIN_DIR="$tiles/cubins" timeout "${MODULE_TIMEOUT_S:-300}" \
        python -m tools.gpu_kernel_check --library="$built/libetc_attention_ffi.so" \
        --device="${DEVICE:-gpu}" --dtypes=bfloat16 --no_check \
        --output_jsonl="$out/tiles.jsonl" \
        || echo "tile sweep failed on $tiles" >&2
  done
fi
# A module that does not compile or fit in time is skipped, not the sweep.
for module in "$dir"/*/; do
  timeout "${MODULE_TIMEOUT_S:-300}" python -m tools.xla_runner \
      --module_dir="$module" --device="${DEVICE:-gpu}" --repeats=10 \
      --warmup=3 --hlo_stats --output_jsonl="$out/xla_runs.jsonl" "${ffi[@]}" \
      || echo "xla_runner failed or timed out on $module" >&2
done
python -m tools.gpu_peers \
    --shapes="${PEER_SHAPES:-4096:256:4,16384:1024:1,16384:256:1}" \
    --models="$models" --passes="${PEER_PASSES:-fwd_bwd}" --repeats=10 --warmup=3 \
    --output_jsonl="$out/peers.jsonl"
for name in ${PROFILE_MODULES:-}; do
  timeout "${MODULE_TIMEOUT_S:-300}" python -m tools.xla_runner \
      --module_dir="$dir/$name" --device="${DEVICE:-gpu}" --repeats=3 \
      --warmup=2 --profile --profile_runs=3 --output_jsonl="$out/profiles.jsonl" "${ffi[@]}" \
      || echo "profiling failed or timed out on $name" >&2
done
