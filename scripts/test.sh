#!/usr/bin/env bash
# The whole test suite, one command: installs what is missing, builds everything,
# starts the servers the tests need (PostgreSQL, MariaDB, Redis on loopback, data
# under build/services, stopped by pid at the end) and runs, in order:
#   1. every test of the main build with CTest (labels unit, conformance, crash, http,
#      integration, kafka, streams, browser, dist, chaos, cluster, model, ...);
#   2. the ASan+UBSan build of the unit, conformance and crash suites and its run
#      (scripts/sanitize.sh asan);
#   3. the TSan build of the concurrency suite and the server tests and its run
#      (scripts/sanitize.sh tsan; docs/reliability.md, Sanitizers);
#   4. the fuzzers: clang-14 build in build-fuzz, 20 s of libFuzzer under ASan+UBSan
#      per fuzzer and a replay of each seed corpus (label fuzz, tests/fuzz/).
# Every part runs even when an earlier one failed; the exit status is non-zero when
# any did, and a table at the end says which part failed and how long each took.
# Extra arguments go to the main ctest run (e.g. -L unit, -R Guard); with any, only
# that run is made (the sanitizer and fuzz parts are skipped, and the table says so).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# The test and bench packages are installed now: a build without them is an error here.
IDEM_CMAKE_ARGS="-DIDEM_BUILD_TESTS=ON -DIDEM_BUILD_BENCH=ON ${IDEM_CMAKE_ARGS:-}" scripts/build.sh
root=$PWD
services_dir="$root/build/services"
scripts/services.sh start "$services_dir"
# Stop the servers however the run ends, and keep the exit status.
trap 'rc=$?; "$root/scripts/services.sh" stop "$services_dir" || true; exit $rc' EXIT
# shellcheck source=/dev/null
source "$services_dir/env.sh"

parts=()
failed=0
# run_part NAME COMMAND...: runs one part, records its status and wall time.
run_part() {
  local name=$1 start rc
  shift
  start=$SECONDS
  echo "== test.sh: $name" >&2
  if "$@"; then rc=0; else rc=$?; failed=1; fi
  parts+=("$(printf '%-34s %-6s %5d s' "$name" "$([[ $rc -eq 0 ]] && echo ok || echo FAILED)" $((SECONDS - start)))")
}
# list_failed DIR: the tests that ctest's last run in DIR failed, into the summary,
# so the last lines of a CI log say which ones.
list_failed() {
  local log="$1/Testing/Temporary/LastTestsFailed.log" line
  [[ -s $log ]] || return 0
  while IFS= read -r line; do parts+=("    failed: ${line#*:}"); done <"$log"
}
forget_failed() { rm -f "$1/Testing/Temporary/LastTestsFailed.log"; }
# run_ctest NAME BUILD_DIR ARGS...: a ctest part in BUILD_DIR.
run_ctest() {
  local name=$1 dir=$2
  shift 2
  forget_failed "$dir"
  run_part "$name" ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" --timeout 600 "$@"
  list_failed "$dir"
}
# run_sanitized NAME KIND: scripts/sanitize.sh's test run of build-KIND.
run_sanitized() {
  forget_failed "build-$2"
  run_part "$1" scripts/sanitize.sh test "$2"
  list_failed "build-$2"
}

run_ctest "main suite (ctest)" build "$@"
if [[ $# -eq 0 ]]; then
  run_part "asan+ubsan build" scripts/sanitize.sh build asan
  # The fuzzers build (one job, clang) while the ASan suite runs: those tests mostly
  # wait on servers and timers, and CI's time is bounded.
  mkdir -p build-fuzz
  JOBS=1 BUILD_DIR=build-fuzz CC=clang-14 CXX=clang++-14 IDEM_CMAKE_ARGS=-DIDEM_FUZZ=ON \
    scripts/build.sh idem_fuzzers >build-fuzz/build.log 2>&1 &
  fuzz_build=$!
  run_sanitized "asan+ubsan unit/conformance/crash" asan
  # The TSan build runs beside the rest of the fuzz build (which has one job).
  run_part "tsan build" scripts/sanitize.sh build tsan
  run_sanitized "tsan concurrency/http" tsan
  wait_fuzz_build() {
    local rc=0
    wait "$fuzz_build" || rc=$?
    tail -3 build-fuzz/build.log
    return "$rc"
  }
  run_part "fuzz build (clang-14, build-fuzz/build.log)" wait_fuzz_build
  run_ctest "fuzz (ctest -L fuzz)" build-fuzz -L fuzz
else
  parts+=("sanitizer and fuzz runs           skipped (ctest arguments given)")
fi

echo "== test.sh: summary" >&2
printf '%s\n' "${parts[@]}" >&2
exit "$failed"
