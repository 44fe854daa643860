#!/usr/bin/env bash
# Prepares the GPU run of record for the fused kernels, here (TensorFlow,
# Triton; no GPU): the modules, the kernels they launch, and the check
# that no cubin is missing (docs/kernels.md, "On a GPU").
#
#   bash tools/gpu/gpu_prepare.sh [MODULES_DIR] [KERNELS_DIR]
#
# writes, in the order the run takes them (tools/gpu/gpu_benchmark.sh runs
# the folders in the order given):
#   MODULES_DIR/twins       both paths, 3 layers, float32, L 1024, G 64,
#                           batch 2, summed and recomputed streams: the
#                           kernels' correctness inside a training step
#   MODULES_DIR/goals       the fused modules at the goals' shapes (12
#                           layers, mixed bfloat16): 4096/256/4 forward and
#                           training step, 16384/1024/1, 16384/256/1
#   MODULES_DIR/recomputed  recomputed streams at the three training
#                           shapes (the memory goals: no layer keeps its
#                           sums)
#   MODULES_DIR/more        today's XLA path at 4096/256/4 (the goals'
#                           twins), and the fused step there with its sums
#                           in bfloat16 (half the kept bytes)
#   KERNELS_DIR             the library and the cubins: bfloat16's default
#                           build and every cubin the modules launch (aligned
#                           for their lengths); the kernels' issue floors
#                           (floors.jsonl)
# then says what travels (the device run carries at most 64 MiB).
# Defaults: gpu_modules, gpu_kernels (both ignored by git; name them in
# the device call's carry). PYTHON: the interpreter (default python).
set -euo pipefail
modules=${1:-gpu_modules}
kernels=${2:-gpu_kernels}
py=${PYTHON:-python}
if [ -e "$modules" ] || [ -e "$kernels" ]; then
  echo "gpu_prepare: $modules or $kernels exists; remove it first (the run" \
       "takes every module under $modules)" >&2
  exit 2
fi
export="$py -m tools.bench.benchmark --mode=xla_export --xla_weights=off --xla=on --dropout_rng=hash"
big="$export --num_layers=12 --dtypes=mixed_bfloat16"
$export --export_dir="$modules/twins" --num_layers=3 --dtypes=float32 \
    --passes=fwd_bwd --lengths=1024 --global_len=64 --batch_size=2 \
    --attention_kernel=xla,fused --recompute_residual_streams=off,on
$big --export_dir="$modules/goals" --passes=fwd,fwd_bwd --lengths=4096 \
    --global_len=256 --batch_size=4 --attention_kernel=fused
for g in 1024 256; do
  $big --export_dir="$modules/goals" --passes=fwd_bwd --lengths=16384 \
      --global_len=$g --batch_size=1 --attention_kernel=fused
done
for shape in 4096:256:4 16384:1024:1 16384:256:1; do
  IFS=: read -r l g b <<<"$shape"
  $big --export_dir="$modules/recomputed" --passes=fwd_bwd --lengths=$l \
      --global_len=$g --batch_size=$b --attention_kernel=fused \
      --recompute_residual_streams=on
done
$big --export_dir="$modules/more" --passes=fwd,fwd_bwd --lengths=4096 \
    --global_len=256 --batch_size=4 --attention_kernel=xla
$big --export_dir="$modules/more" --passes=fwd_bwd --lengths=4096 \
    --global_len=256 --batch_size=4 --attention_kernel=fused \
    --stream_dtype=compute
$py -m tools.kernels.build_kernels --output_dir="$kernels" --dtypes=bfloat16 \
    --modules="$modules"
# The issue floors of the kernels the check times (summed streams and
# dropout; recomputed from 11 layers; neither), for the summary to set the
# card's timings beside.
for flags in "" "--streams=ss00" "--streams=0000 --no_dropout"; do
  $py -m tools.kernels.kernel_sass --cubin_dir="$kernels/cubins" --top_lines=0 \
      --output_jsonl="$kernels/floors.jsonl" $flags >/dev/null
done
# Nothing the modules launch may be missing: a CUDA handler fails the call.
# The missing ones by name, and the count.
$py -m tools.kernels.module_variants --modules="$modules" \
    --cubins="$kernels/cubins" | grep -E "MISSING|missing from"
du -sh "$modules" "$kernels"
