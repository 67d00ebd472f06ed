#!/usr/bin/env bash
# The README's two commands must never pass without testing, in either order
# and whatever configured their build directory before:
#  1. a build directory left with the tests and CUDA switched off (as the old
#     run-example.sh left it, or a manual cmake -D...) gets them back from
#     scripts/test.sh;
#  2. scripts/test.sh fails when ctest finds no tests;
#  3. scripts/run-example.sh afterwards leaves the configuration as it is, so
#     ctest there still lists every test tier.
# It builds one small target only (SMPROF_TARGETS) and skips the sanitizer
# builds, to stay quick; the full commands run in CI itself.
set -uo pipefail
src="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
build="$tmp/build"
fail() { echo "FAIL: $*" >&2; exit 1; }
cache() { grep -E "^$1:" "$build/CMakeCache.txt" | cut -d= -f2; }

cmake -S "$src" -B "$build" -G Ninja -DSMPROF_BUILD_TESTS=OFF -DSMPROF_BUILD_CUDA=OFF >/dev/null \
  || fail "could not configure the scratch build"

out="$(SMPROF_BUILD_DIR="$build" SMPROF_TARGETS=smprof_build_info SMPROF_SANITIZERS=0 \
  SMPROF_CTEST_ARGS="-R ^no-test-has-this-name$" "$src/scripts/test.sh" 2>&1)"
rc=$?
echo "$out" | tail -5
[ "$rc" -ne 0 ] || fail "scripts/test.sh exited 0 although ctest ran no test"
grep -q "No tests were found" <<<"$out" || fail "ctest did not say it found no tests"
[ "$(cache SMPROF_BUILD_TESTS)" = ON ] || fail "scripts/test.sh left SMPROF_BUILD_TESTS=$(cache SMPROF_BUILD_TESTS)"
[ "$(cache SMPROF_BUILD_CUDA)" = ON ] || fail "scripts/test.sh left SMPROF_BUILD_CUDA=$(cache SMPROF_BUILD_CUDA)"
[ "$(cache SMPROF_SANITIZE)" = OFF ] || fail "scripts/test.sh left SMPROF_SANITIZE=$(cache SMPROF_SANITIZE)"

SMPROF_BUILD_DIR="$build" SMPROF_TARGETS=smprof_build_info "$src/scripts/run-example.sh" >/dev/null 2>&1 \
  || fail "scripts/run-example.sh failed"
[ "$(cache SMPROF_BUILD_TESTS)" = ON ] || fail "scripts/run-example.sh switched the tests off"
listed="$(ctest --test-dir "$build" -N | grep -cE '^ *Test +#')"
[ "$listed" -gt 0 ] || fail "after run-example.sh, ctest lists no tests"
echo "PASS: tests stay on in either order ($listed tests listed before building them), and no tests fails"
