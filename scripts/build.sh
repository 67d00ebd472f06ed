#!/usr/bin/env bash
# Configures and builds smprof into ${SMPROF_BUILD_DIR:-build}.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SMPROF_BUILD_DIR:-$root/build}"
cuda="${CUDA_HOME:-/usr/local/cuda}"
jobs="${SMPROF_JOBS:-$(nproc)}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" -DCUDAToolkit_ROOT="$cuda" "$@" >/dev/null
ninja -C "$build" -j "$jobs"
