#!/usr/bin/env bash
# The main job: installs what is missing, builds smprof, and profiles the
# bundled example (a tiled matrix multiply) into smprof-example.pftrace (or the
# path given as the first argument), replacing an earlier one.
#
# It builds only what the example needs, in the same build directory and
# with the same configuration as scripts/test.sh (scripts/build.sh), so the
# two commands can run in either order.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SMPROF_BUILD_DIR:-$root/build}"
trace="${1:-$PWD/smprof-example.pftrace}"
"$root/scripts/install-deps.sh"
SMPROF_BUILD_DIR="$build" SMPROF_TARGETS="${SMPROF_TARGETS:-smprof-run smprof-collector smprof smprof_inject smprof_preload smprof_example_gemm}" \
  "$root/scripts/build.sh"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "smprof: built everything, but this machine has no NVIDIA GPU (nvidia-smi -L failed), so there is"
  echo "smprof: nothing to profile here. On a machine with a GPU, run:"
  echo "smprof:   $build/bin/smprof-run -o smprof-example.pftrace -- $build/bin/smprof_example_gemm 1024"
  exit 0
fi
"$build/bin/smprof-run" --force -o "$trace" -- "$build/bin/smprof_example_gemm" 1024
