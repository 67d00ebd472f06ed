#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test tier: unit, e2e,
# compile, install and gpu in the build directory, then the host code once
# more under ASan+UBSan and TSan (scripts/test-sanitizers.sh). CI runs exactly
# this (.ci/run).
#
# It cannot pass without testing: scripts/build.sh turns every test on
# whatever configured the build directory before, ctest fails when it finds
# no tests, and on a machine with an NVIDIA GPU the GPU tests must run
# (SMPROF_REQUIRE_GPU=1: a GPU test that would skip fails instead). Where
# there is no GPU they are reported as skipped.
#
# Environment: SMPROF_BUILD_DIR, SMPROF_JOBS, SMPROF_TARGETS (see build.sh),
# SMPROF_CTEST_ARGS (extra ctest arguments, e.g. "-L unit"),
# SMPROF_SANITIZERS=0 to leave out the sanitizer builds (a quicker local loop;
# CI never sets it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SMPROF_BUILD_DIR:-$root/build}"
jobs="${SMPROF_JOBS:-$(nproc)}"
"$root/scripts/install-deps.sh"
SMPROF_BUILD_DIR="$build" "$root/scripts/build.sh"
if nvidia-smi -L >/dev/null 2>&1; then
  echo "smprof: NVIDIA GPU found: the gpu tests must run (SMPROF_REQUIRE_GPU=1)"
  export SMPROF_REQUIRE_GPU=1
else
  echo "smprof: no NVIDIA GPU here: the gpu tests will be reported as skipped"
fi
# shellcheck disable=SC2086  # SMPROF_CTEST_ARGS is a list
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$jobs" --timeout 300 ${SMPROF_CTEST_ARGS:-}
if [ "${SMPROF_SANITIZERS:-1}" != 0 ]; then
  "$root/scripts/test-sanitizers.sh"
fi
