#!/usr/bin/env bash
# The whole test suite, one command: installs what is missing, builds everything,
# starts the servers the tests need (PostgreSQL, MariaDB, Redis on loopback, data
# under build/services, stopped by pid at the end) and runs, in order:
#   1. the tests of the main build with CTest (labels http, integration, kafka,
#      streams, browser, dist, chaos, cluster, model, ...) but unit, conformance and
#      crash, which run once, in part 2, and are not compiled here either
#      (IDEM_SKIP_TEST_LABELS, cmake/IdemTest.cmake): GCC's -Werror checks the product
#      code and the other tests; `scripts/build.sh tests_unit` builds them with GCC;
#   2. the ASan+UBSan build (clang-14, build-asan) of the unit, conformance and crash
#      suites and its run (scripts/sanitize.sh asan): every test of those labels, with
#      the sanitizers' checks on top. Running them in the main build as well took
#      ~300 s of CPU, which the 20 minutes on two cores do not have
#      (docs/reliability.md, "The test command's time"); `scripts/test.sh -L
#      'unit|conformance|crash'` runs them in the main build;
#   3. the fuzzers, built in the same tree: 20 s of libFuzzer under ASan+UBSan per
#      fuzzer and a replay of each seed corpus (label fuzz, tests/fuzz/);
#   4. the TSan build of the concurrency suite and the server tests and its run,
#      with the main tree's black-box tests (label http_blackbox) against the
#      TSan-built `idem` (scripts/sanitize.sh tsan; docs/reliability.md, Sanitizers).
# The sanitizer trees run each test binary as three CTest tests (IDEM_TEST_SHARDS).
# The two sanitizer builds run in the background, one after the other, at the lowest
# CPU priority (nice 19) from before the main build (below says why).
# Every part runs even when an earlier one failed; the exit status is non-zero when
# any did, and a table at the end says which part failed and how long each took.
# Extra arguments go to the main ctest run (e.g. -L unit, -R Guard); with any, only
# that run is made, with every test built (the sanitizer and fuzz parts are skipped,
# and the table says so).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# The full run builds no benchmark: no test runs one, and their ~60 s of CPU (Beast's
# http_ceiling and pair_load are most of it) are not in the 20 minutes; bench/*.sh
# build what they run (-DIDEM_BUILD_BENCH=ON) into the same tree. With ctest
# arguments everything is built, as before.
if [[ $# -eq 0 ]]; then
  skip_labels="unit;conformance;crash" bench=OFF
else
  skip_labels="" bench=ON
fi
root=$PWD
services_dir="$root/build/services"
# Stop the background sanitizer builds (below) and the servers however the run ends,
# and keep the exit status.
builder=
services_started=
trap 'rc=$?; [[ -z $builder ]] || kill -- "-$builder" 2>/dev/null || true
      [[ -z $services_started ]] || "$root/scripts/services.sh" stop "$services_dir" || true
      exit $rc' EXIT

# The two sanitizer builds run in the background, one after the other, at the lowest
# CPU priority (nice 19), from before the main build: they take the CPU that it and
# the main suite leave (the end of a build, where one unit compiles alone; the
# suite's tests mostly wait on servers, timers and their own idem processes), which
# CI's 90 minutes on two cores need. Their logs: build-KIND/build.log.
if [[ $# -eq 0 ]]; then
  for kind in asan tsan; do
    mkdir -p "build-$kind"
    rm -f "build-$kind/build.status"
  done
  # setsid: its own process group, so the EXIT trap can stop the builds with it. A new
  # session is also a new scheduler autogroup (Linux), in which nice is relative to the
  # group only: its own nice goes to 19 too, or the builds take half of the CPU from
  # the tests (seen: dist.first_run took 829 s beside them).
  setsid bash -c '
    echo 19 >/proc/self/autogroup 2>/dev/null || true
    for kind in asan tsan; do
      start=$SECONDS
      if nice -n 19 scripts/sanitize.sh build "$kind" >"build-$kind/build.log" 2>&1; then rc=0; else rc=$?; fi
      echo "$rc $((SECONDS - start))" >"build-$kind/build.status"
    done' &
  builder=$!
fi

# The preset ci (CMakePresets.json): tests required (their packages are installed
# now), line tables only, lld, and ccache in build/ccache, so that dist.first_run's
# tree, build-dist beside it, takes its objects from the cache instead of compiling
# idem a second time (tests/dist/CMakeLists.txt).
PRESET=ci IDEM_CMAKE_ARGS="-DIDEM_BUILD_BENCH=$bench -DIDEM_SKIP_TEST_LABELS=$skip_labels ${IDEM_CMAKE_ARGS:-}" scripts/build.sh
scripts/services.sh start "$services_dir"
services_started=1
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
# run_sanitized NAME KIND: scripts/sanitize.sh's test run of build-KIND (the TSan run
# also runs the main tree's black-box tests against its `idem`).
run_sanitized() {
  forget_failed "build-$2"
  forget_failed build
  run_part "$1" scripts/sanitize.sh test "$2"
  list_failed "build-$2"
  list_failed build
}

# wait_build KIND: waits for the background build of build-KIND; its status, and the
# last lines of its log.
wait_build() {
  local status=build-$1/build.status rc secs
  while [[ ! -f $status ]]; do
    # Gone, or a zombie (exited, not yet reaped), without writing the status.
    local state=X
    [[ -r /proc/$builder/stat ]] && read -r _ _ state _ <"/proc/$builder/stat"
    [[ $state != [XZ] ]] || { echo "test.sh: the $1 build stopped without a status" >&2; return 1; }
    sleep 5
  done
  read -r rc secs <"$status"
  tail -3 "build-$1/build.log"
  echo "test.sh: the $1 build took $secs s (in the background, nice 19)" >&2
  return "$rc"
}

if [[ $# -eq 0 ]]; then
  # (-LE: what a build that has them, e.g. after `ninja tests_unit`, would also list.)
  run_ctest "main suite (not unit/conf/crash)" build -LE '^(unit|conformance|crash)$'
  run_part "asan+ubsan+fuzz build (wait)" wait_build asan
  run_sanitized "asan+ubsan unit/conformance/crash" asan
  run_ctest "fuzz (ctest -L fuzz)" build-asan -L fuzz
  run_part "tsan build (wait)" wait_build tsan
  run_sanitized "tsan concurrency/http" tsan
else
  run_ctest "main suite (ctest)" build "$@"
  parts+=("sanitizer and fuzz runs           skipped (ctest arguments given)")
fi

echo "== test.sh: summary" >&2
printf '%s\n' "${parts[@]}" >&2
exit "$failed"
