#!/usr/bin/env bash
# The sanitizer runs of the test suite (both are part of scripts/test.sh; see
# docs/reliability.md "Sanitizers"):
#   asan  ASan+UBSan build (build-asan, clang-14) of every test labelled unit,
#         conformance or crash, run with ctest; any report (leak, overflow,
#         use-after-free, undefined behaviour) fails the test that caused it. The
#         fuzzers (tests/fuzz, ctest -L fuzz) are built in the same tree.
#   tsan  TSan build (build-tsan) of the concurrency suite, the server tests (label
#         http) and the `idem` program, run with ctest and the suppressions in
#         scripts/tsan.supp; then the black-box tests (label http_blackbox) as the
#         main tree (build/) built them, with IDEM_BIN set to the TSan-built `idem`:
#         they check the server they start, and compiling them with TSan as well
#         was ~50 s of CPU. Debian's absl::Mutex is not built with TSan:
#         tests/tsan/absl_sync_shim.cc tells TSan what its locks order.
#
#   scripts/sanitize.sh build asan|tsan     configure and build the tests of that run
#   scripts/sanitize.sh test asan|tsan [ctest args...]
#                                            run them (needs the services' env:
#                                            source build/services/env.sh first)
#
# Both builds compile the product code at -O1 -g1: fast enough to run, line numbers
# in every report, and about half the compile time of -O2 -g. Test code is at -O1 in
# the TSan build and at -O0 in the ASan+UBSan build, where the examples and the
# `idem` program are too: there only the libraries the fuzzers run keep -O1
# (cmake/IdemBuildSpeed.cmake, IDEM_TEST_COMPILE_OPTIONS, says why).
# TSan is GCC's (the shim is written for it).
# Each test binary runs as three CTest tests (shards), each a third of its tests in one
# process (IDEM_TEST_SHARDS, cmake/IdemTest.cmake): a sanitized process's start and
# exit cost more CPU than most tests (201 s against 126 s for the ASan+UBSan run).
# A failing shard's output names the failing tests; run one alone with
# build-KIND/<dir>/<binary> --gtest_filter=NAME. The tests GoogleTest skipped
# (GTEST_SKIP, each with its reason in the code) are listed after the run.
# Environment: JOBS as in scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() {
  echo "usage: scripts/sanitize.sh build|test asan|tsan [ctest args...]" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
action=$1 kind=$2
shift 2

case "$kind" in
  asan)
    build_dir=build-asan
    # The preset asan (CMakePresets.json): clang-14, whose ASan+UBSan build is faster
    # than GCC's. Warnings are the GCC build's job: -Werror is off here (clang warns
    # about other things). The same tree builds the fuzzers (-DIDEM_FUZZ=ON,
    # tests/fuzz; ctest -L fuzz), so the libraries are compiled once for both runs.
    targets=(tests_unit tests_conformance tests_crash idem_fuzzers)
    labels='^(unit|conformance|crash)$'
    ;;
  tsan)
    build_dir=build-tsan
    # The preset tsan: GCC, for which the absl::Mutex shim and scripts/tsan.supp are
    # written.
    targets=(concurrency_test tests_http tests_tsan idem)
    # Only concurrency_test is built of the conformance label here; tsan is the
    # absl::Mutex shim's own test (tests/tsan/).
    labels='^(http|conformance|tsan)$'
    # Run from the main tree against build-tsan's `idem` (above).
    blackbox_labels='^http_blackbox$'
    ;;
  *) usage ;;
esac

# Reports go to stderr and fail the process: ctest shows them with the failing test.
# (The test presets asan and tsan of CMakePresets.json set the same options.)
# detect_leaks: LeakSanitizer runs at exit of every test binary.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# second_deadlock_stack: both stacks of a lock-order report. history_size: a longer
# per-thread history so a race report shows the earlier access, not "failed to restore".
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$root/scripts/tsan.supp"

case "$action" in
  build)
    # The preset's settings only (CMakePresets.json: compiler, -O1 -g1, no benchmarks,
    # three shards a binary), not the caller's IDEM_CMAKE_ARGS or build type.
    PRESET=$kind BUILD_DIR=$build_dir IDEM_CMAKE_ARGS='' CMAKE_BUILD_TYPE='' scripts/build.sh "${targets[@]}"
    ;;
  test)
    [[ -f "$build_dir/CTestTestfile.cmake" ]] || {
      echo "sanitize.sh: $build_dir is not built: run scripts/sanitize.sh build $kind" >&2
      exit 1
    }
    if [[ -n ${blackbox_labels:-} ]] &&
      [[ $(ctest --test-dir build -N -L "$blackbox_labels" 2>/dev/null) != *"Test #"* ]]; then
      echo "sanitize.sh: the main tree (build/) has no $blackbox_labels tests built; the $kind run" \
        "starts build-$kind's idem from them: run scripts/build.sh tests_http_blackbox" >&2
      exit 1
    fi
    # The black-box tests wait on their servers about half of the time: they run beside
    # the others, their output after them.
    blackbox_pid=
    if [[ -n ${blackbox_labels:-} ]]; then
      IDEM_BIN=$root/$build_dir/src/cli/idem \
        ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 600 -L "$blackbox_labels" "$@" \
        >"$build_dir/blackbox.log" 2>&1 &
      blackbox_pid=$!
      trap '[[ -z $blackbox_pid ]] || kill "$blackbox_pid" 2>/dev/null || true' EXIT
    fi
    # -L selects by label; the tests of binaries not built here have no labels and
    # are not selected (ctest -N -L ... lists exactly what runs).
    rc=0
    ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" --timeout 600 -L "$labels" "$@" || rc=$?
    # A shard that skipped some of its tests passed: name those tests, as ctest does
    # for the tests it skips itself.
    log=$build_dir/Testing/Temporary/LastTest.log
    skipped=
    [[ ! -f $log ]] || skipped=$(sed -n 's/^\[  SKIPPED \] \([A-Za-z_][^ ]*\).*/\t\1/p' "$log" | sort -u)
    if [[ -n $skipped ]]; then
      echo "sanitize.sh: tests skipped by GoogleTest (GTEST_SKIP; the reasons are in the code):"
      echo "$skipped"
    fi
    if [[ -n $blackbox_pid ]]; then
      wait "$blackbox_pid" || rc=$?
      blackbox_pid=
      echo "sanitize.sh: the black-box tests of build/ against $build_dir/src/cli/idem ($build_dir/blackbox.log):"
      cat "$build_dir/blackbox.log"
    fi
    exit "$rc"
    ;;
  *) usage ;;
esac
