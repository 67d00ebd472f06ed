#!/usr/bin/env bash
# Figures measured on a GPU machine with a built tree, side by side in one
# run: the per-event cost of a marker (idle and recording; recorder out of
# line, the default, and inlined) and the example kernel's time compiled out,
# with idle markers, and profiled.
#   bench/gpu_figures.sh [build-dir]
set -u
build="${1:-build}"
bin="$build/bin"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for variant in smprof_bench_event_cost smprof_bench_event_cost_inline; do
  echo "== $variant: markers idle (plain run)"
  timeout 120 "$bin/$variant" | tail -4
  echo "== $variant: recording (under smprof-run)"
  timeout 120 "$bin/smprof-run" -q --force -o "$tmp/bench.json" -- "$bin/$variant" | tail -4
done

best() { sed -n 's/.*best \([0-9.]*\) ms.*/\1/p'; }
for n in 1024 2048; do
  echo "== example gemm_tiled n=$n: best of 10 runs in ms, 3 interleaved rounds; ratios against compiled out"
  for round in 1 2 3; do
    off=$(timeout 120 "$bin/smprof_example_gemm_disabled" "$n" 10 | best)
    idle=$(timeout 120 "$bin/smprof_example_gemm" "$n" 10 | best)
    idle_inl=$(timeout 120 "$bin/smprof_example_gemm_inline" "$n" 10 | best)
    on=$(timeout 300 "$bin/smprof-run" -q --force --buffer-mb 512 -o "$tmp/gemm.json" -- "$bin/smprof_example_gemm" "$n" 10 | best)
    on_inl=$(timeout 300 "$bin/smprof-run" -q --force --buffer-mb 512 -o "$tmp/gemm.json" -- \
      "$bin/smprof_example_gemm_inline" "$n" 10 | best)
    awk -v r="$round" -v a="$off" -v b="$idle" -v c="$on" -v d="$idle_inl" -v e="$on_inl" 'BEGIN {
      printf "round %d: compiled out %s | idle %s (x%.2f) | profiled %s (x%.2f) | inline idle %s (x%.2f) | inline profiled %s (x%.2f)\n",
        r, a, b, b / a, c, c / a, d, d / a, e, e / a }'
  done
done
