#!/usr/bin/env bash
# bench/fuzz.sh: long runs of the libFuzzer targets of tests/fuzz:
# each fuzzer executes RUNS inputs (default 10^7) from its committed seed corpus
# plus what earlier runs of this script found, under ASan+UBSan. Prints one table
# (fuzzer, inputs, exec/s, crashes, corpus size, seconds) and exits 1 when any
# fuzzer found a crash, leak, timeout or out-of-memory input (kept, with the log,
# in build-fuzz/bench-fuzz/).
#
#   bench/fuzz.sh [--runs N] [--jobs J] [--timeout S] [FUZZER ...]
#                                         (FUZZER: http_api, store_url, ...)
#
# --timeout: libFuzzer's -timeout, the wall-clock seconds one input may take before
# it is reported as a timeout (default 10). libFuzzer measures wall time: a fuzzer
# stopped with SIGSTOP (to keep a benchmark quiet) reports the input it was running
# as a timeout when continued, unless this is longer than the stop.
#
# Builds the fuzzers first when needed (clang-14, -DIDEM_FUZZ=ON, in build-fuzz;
# see docs/reliability.md). 10^7 inputs take from minutes (the small parsers) to
# hours (http_api) per fuzzer on one core; --jobs runs that many fuzzers at once.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
runs=10000000
jobs=1
timeout=10
names=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
[[ $runs =~ ^[0-9]+$ && $runs -gt 0 ]] || { echo "fuzz.sh: --runs takes a positive integer" >&2; exit 2; }
[[ $jobs =~ ^[0-9]+$ && $jobs -gt 0 ]] || { echo "fuzz.sh: --jobs takes a positive integer" >&2; exit 2; }
[[ $timeout =~ ^[0-9]+$ && $timeout -gt 0 ]] || { echo "fuzz.sh: --timeout takes a positive number of seconds" >&2; exit 2; }
build=$root/build-fuzz
if [[ ${#names[@]} -eq 0 ]]; then
  for dir in "$root"/tests/fuzz/corpus/*/; do names+=("$(basename "$dir")"); done
fi
for name in "${names[@]}"; do
  [[ -d $root/tests/fuzz/corpus/$name ]] || { echo "fuzz.sh: no fuzzer '$name' (tests/fuzz/corpus/)" >&2; exit 2; }
done
targets=()
for name in "${names[@]}"; do targets+=("fuzz_$name"); done
BUILD_DIR=build-fuzz CC=${CC:-clang-14} CXX=${CXX:-clang++-14} \
  IDEM_CMAKE_ARGS="-DIDEM_FUZZ=ON ${IDEM_CMAKE_ARGS:-}" JOBS=${JOBS:-1} \
  scripts/build.sh "${targets[@]}" >&2

out=$build/bench-fuzz
mkdir -p "$out"
# One fuzzer: its stats in $out/NAME.stats ("inputs exec/s crashes corpus seconds").
run_one() {
  local name=$1 work=$out/work/$1 start end status=0
  mkdir -p "$work" "$out/crashes"
  rm -f "$out/crashes/$name-"*
  start=$(date +%s)
  # -close_fd_mask=2: the target's own stderr is discarded (a config fuzzer's refused
  # input prints its `idem: ...` line: ~1 GB of log per 10^7 inputs); libFuzzer's
  # output, the sanitizers' reports and a violated property (fuzz_check.h) still
  # reach the log.
  "$build/tests/fuzz/fuzz_$name" -runs="$runs" -timeout="$timeout" -rss_limit_mb=2048 -close_fd_mask=2 \
    -print_final_stats=1 -artifact_prefix="$out/crashes/$name-" \
    "$work" "$root/tests/fuzz/corpus/$name" >"$out/$name.log" 2>&1 || status=$?
  end=$(date +%s)
  local inputs rate crashes corpus
  inputs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$name.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out/$name.log" | tail -1)
  # Findings only: libFuzzer also saves "slow-unit-" inputs (-report_slow_units),
  # which are no failure.
  crashes=$(find "$out/crashes" -name "$name-*" ! -name "$name-slow-unit-*" | wc -l)
  [[ $status -ne 0 && $crashes -eq 0 ]] && crashes="exit $status"
  # libFuzzer's corpus at the end (seeds and findings that add coverage).
  corpus=$(grep -o 'corp: [0-9]*' "$out/$name.log" | tail -1 | cut -d' ' -f2)
  echo "${inputs:-?} ${rate:-?} ${crashes// /_} ${corpus:-?} $((end - start))" >"$out/$name.stats"
}
running=0
for name in "${names[@]}"; do
  echo "fuzz.sh: $name, $runs inputs (log: $out/$name.log)" >&2
  run_one "$name" &
  running=$((running + 1))
  if [[ $running -ge $jobs ]]; then wait -n || true; running=$((running - 1)); fi
done
wait

failed=0
printf '%-16s %12s %8s %8s %8s %8s\n' fuzzer inputs exec/s crashes corpus seconds
for name in "${names[@]}"; do
  read -r inputs rate crashes corpus seconds <"$out/$name.stats"
  printf '%-16s %12s %8s %8s %8s %8s\n' "$name" "$inputs" "$rate" "$crashes" "$corpus" "$seconds"
  [[ $crashes == 0 ]] || failed=1
done
if [[ $failed -ne 0 ]]; then
  echo "fuzz.sh: findings in $out/crashes (reproduce: build-fuzz/tests/fuzz/fuzz_NAME FILE)" >&2
fi
exit $failed
