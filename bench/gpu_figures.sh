#!/usr/bin/env bash
# Figures measured on a GPU machine with a built tree, side by side in one
# run: the per-event cost of a marker against reference recorders (idle and
# recording; slow paths inlined, the default, and out of line), what each
# building block of a marker costs, and what markers cost on GEMM kernels by
# density, compiled out, idle and recording (bench/sgemm_figures.sh).
#   bench/gpu_figures.sh [build-dir]
set -u
build="${1:-build}"
bin="$build/bin"

# Per-event cost of marker designs side by side: smprof idle and recording
# against reference recorders. Plain runs: the benchmark publishes its own arena.
for variant in smprof_bench_recorder_cost smprof_bench_recorder_cost_outline; do
  echo "== $variant"
  timeout 300 "$bin/$variant"
done
echo "== smprof_bench_marker_building_blocks"
timeout 60 "$bin/smprof_bench_marker_building_blocks"

# Marker cost on GEMM kernels by density, compiled out / idle / recording.
bash "$(dirname "$0")/sgemm_figures.sh" "$build"
