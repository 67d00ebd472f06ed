#!/usr/bin/env bash
# Builds smprof's host code twice more and runs CPU tests under sanitizers
# (scripts/test.sh calls it; it installs nothing: scripts/install-deps.sh did):
#
#   address (ASan + UBSan, build-asan): every unit and e2e test, the short
#     fuzz runs (tests/fuzz) included. The code that reads untrusted bytes
#     (shared memory, messages, arena records) is only as safe as its bounds
#     checks; ASan turns an over-read the tests provoke into a failure, and
#     -fno-sanitize-recover=all makes every UBSan report fail its test (the
#     libraries and fuzz targets carry UBSan; the gtest drivers ASan alone).
#   thread (TSan, build-tsan): the tests of the code that runs threads or
#     shares memory between processes, chosen by test binary (tsan_tests;
#     labels do not say which code is multi-threaded): the transport (unit and
#     two-process), the collector (unit, and e2e with the real binary) and the
#     injector core (shipper, harvest). Only those binaries are built.
#
# Host code only (SMPROF_BUILD_CUDA=OFF): device code is not sanitized, and
# the gpu tests run in the normal build. RelWithDebInfo at -O1 -g1: the
# sanitizers' recommended level, line tables are all their stack traces
# need, and it halves the compile time of the json-heavy files. Unity-built as
# scripts/build.sh builds. Each phase prints its duration.
#
# Environment: SMPROF_ASAN_BUILD_DIR, SMPROF_TSAN_BUILD_DIR (default
# build-asan, build-tsan), SMPROF_JOBS (default: nproc), CUDA_HOME,
# SMPROF_UNITY_BUILD (default ON).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
asan_dir="${SMPROF_ASAN_BUILD_DIR:-$root/build-asan}"
tsan_dir="${SMPROF_TSAN_BUILD_DIR:-$root/build-tsan}"
jobs="${SMPROF_JOBS:-$(nproc)}"
cuda="${CUDA_HOME:-/usr/local/cuda}"

tsan_tests=(transport_test transport_two_process_test collector_test collector_e2e_test injector_core_test)

# Sanitizer reports fail the test that caused them, with a stack.
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
# smprof-run puts libsmprof_preload.so (built without sanitizers, libc only)
# first in LD_PRELOAD, so in the ASan-built programs the e2e tests run under
# it the ASan runtime is no longer first in the library list, and ASan would
# refuse to start. The shim interposes only cuptiSubscribe*, nothing ASan
# intercepts, so the check is safely off.
export ASAN_OPTIONS="verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"

failed=()
timings=()
# phase <label> <command...>: runs it, records its duration and any failure,
# and returns its status.
phase() {
  local label="$1" start=$SECONDS status=0
  shift
  echo "smprof: sanitizers: $label"
  "$@" || status=$?
  ((status == 0)) || failed+=("$label")
  timings+=("$(printf '%-16s %5d s' "$label" $((SECONDS - start)))")
  echo "smprof: sanitizers: $label took $((SECONDS - start)) s"
  return $status
}

configure() {  # configure <dir> <SMPROF_SANITIZE value>
  cmake -S "$root" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DSMPROF_BUILD_CUDA=OFF -DSMPROF_BUILD_TESTS=ON -DSMPROF_SANITIZE="$2" -DCUDAToolkit_ROOT="$cuda" \
    -DSMPROF_UNITY_BUILD="${SMPROF_UNITY_BUILD:-ON}" >/dev/null
}

build() {  # build <dir> <SMPROF_SANITIZE value> [targets...]
  local dir="$1" mode="$2"
  shift 2
  configure "$dir" "$mode" && ninja -C "$dir" -j "$jobs" "$@"
}

run_tests() {  # run_tests <dir> <ctest selection...>
  local dir="$1"
  shift
  ctest --test-dir "$dir" --no-tests=error --output-on-failure -j "$jobs" --timeout 300 "$@"
}

total_start=$SECONDS
if phase "address: build" build "$asan_dir" address; then
  phase "address: tests" run_tests "$asan_dir" -L '^(unit|e2e)$'
fi
tsan_regex="^($(IFS='|'; echo "${tsan_tests[*]}"))\\."
if phase "thread: build" build "$tsan_dir" thread "${tsan_tests[@]}"; then
  phase "thread: tests" run_tests "$tsan_dir" -R "$tsan_regex"
fi

echo "smprof: sanitizers: durations"
printf '  %s\n' "${timings[@]}" "$(printf '%-16s %5d s' total $((SECONDS - total_start)))"
if ((${#failed[@]})); then
  printf 'smprof: sanitizers: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "smprof: sanitizers: all passed"
