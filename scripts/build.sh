#!/usr/bin/env bash
# Configures and builds smprof into ${SMPROF_BUILD_DIR:-build}.
#
# Every option that decides what is built is passed each time, so whatever
# configured the build directory before (the other README command, a manual
# cmake -D...) cannot leave the tests, the CUDA code or a sanitizer switched
# the wrong way: the README's two commands share one build directory in
# either order. Extra arguments are passed to cmake and come last.
#
# Host code is optimised with line tables only (-g1: stack traces name file
# and line; full debug info took a third of the compile time). Host targets
# are unity-built (SMPROF_UNITY_BUILD, see
# cmake/SmprofWarnings.cmake): a fresh build takes about two thirds of the
# time, an edit recompiles its batch of 16 files.
#
# Environment: SMPROF_BUILD_DIR, SMPROF_TARGETS (space-separated ninja
# targets; default: everything), SMPROF_JOBS (default: nproc), CUDA_HOME,
# SMPROF_UNITY_BUILD (ON or OFF, default ON; OFF for many small edits).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SMPROF_BUILD_DIR:-$root/build}"
cuda="${CUDA_HOME:-/usr/local/cuda}"
jobs="${SMPROF_JOBS:-$(nproc)}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" -DCUDAToolkit_ROOT="$cuda" \
  -DSMPROF_BUILD_TESTS=ON -DSMPROF_BUILD_CUDA=ON -DSMPROF_SANITIZE=OFF \
  -DSMPROF_UNITY_BUILD="${SMPROF_UNITY_BUILD:-ON}" "$@" >/dev/null
# shellcheck disable=SC2086  # SMPROF_TARGETS is a list
ninja -C "$build" -j "$jobs" ${SMPROF_TARGETS:-}
