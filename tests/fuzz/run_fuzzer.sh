#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SEEDS OUT SECONDS [libFuzzer options...]
# Fuzzes FUZZER for SECONDS from the seed corpus SEEDS (read only: the committed
# corpus is never written). New inputs go to OUT/work/NAME, a crash's input to
# OUT/crashes/NAME-crash-*; the exit status is libFuzzer's (non-zero on a finding).
# The random seed is IDEM_FUZZ_SEED (default 1), so a run of the test command is
# repeatable and a finding reproduces with the same seed; bench/fuzz.sh and
# IDEM_FUZZ_SEED=0 (libFuzzer picks one and prints it) explore further.
set -euo pipefail
fuzzer=$1 seeds=$2 out=$3 seconds=$4
shift 4
name=$(basename "$fuzzer")
name=${name#fuzz_}
mkdir -p "$out/work/$name" "$out/crashes"
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -seed="${IDEM_FUZZ_SEED:-1}" -artifact_prefix="$out/crashes/$name-" "$@" "$out/work/$name" "$seeds"
