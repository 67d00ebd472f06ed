#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test tier. GPU tests skip
# with a visible message where no NVIDIA GPU is present.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SMPROF_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
SMPROF_BUILD_DIR="$build" "$root/scripts/build.sh"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "smprof: no NVIDIA GPU here: the gpu tests will be reported as skipped"
fi
ctest --test-dir "$build" --output-on-failure -j "${SMPROF_JOBS:-$(nproc)}" --timeout 300
