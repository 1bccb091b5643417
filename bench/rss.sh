#!/usr/bin/env bash
# bench/rss.sh: the memory run: the resident set of `idem serve` on
# rocksdb:// (durable defaults) as its store grows from one step to --records
# finished records (default 1 M to 10 M in steps of 1 M). Per step:
#   1. bench/rss_fill adds the next --step records in-process through the public
#      API (idem::Guard claim + complete, --threads threads; filling through HTTP
#      would take hours) and reports its own RSS;
#   2. `idem serve --store rocksdb://DIR` starts on the directory, takes a warm-up
#      of --warmup seconds of new-key claims and then --warmup seconds of
#      duplicates of random finished keys (wrk, 16 connections), and its VmRSS
#      (/proc/PID/status) is read: what an operator sees; then it is stopped.
# Prints a table (records, server RSS, change vs the first step, the filler's RSS,
# the store's size on disk) and last `ratio rss_<last>/rss_<first> = X.XX`
# (`ratio rss_10M/rss_1M` for the full run; target: within 1 ± 0.10).
#
#   bench/rss.sh [--records N] [--step N] [--threads N] [--warmup SECONDS]
#
# Builds idem (unless IDEM_BIN names an idem binary to run instead) and rss_fill
# into build/, works in build/bench-rss/ (removed first).
# The fill opens the store with sync=off (no fsync per write: the records it leaves
# are the same, only a crash could lose some, and a durable fill would take hours);
# `idem serve` runs with the durable defaults. Run it alone: anything else on the
# machine slows the fill.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
records=10000000
step=1000000
threads=4
warmup=5
while [[ $# -gt 0 ]]; do
  case $1 in
    --records) records=$2; shift 2 ;;
    --step) step=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    *) echo "bench/rss.sh: unknown option $1 (--records N, --step N, --threads N, --warmup S)" >&2
       exit 2 ;;
  esac
done
for v in "$records" "$step" "$threads" "$warmup"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench/rss.sh: options take positive integers, got '$v'" >&2; exit 2; }
done
(( step <= records )) || { echo "bench/rss.sh: --step ($step) is larger than --records ($records)" >&2; exit 2; }

command -v wrk >/dev/null || apt-get install -y --no-install-recommends wrk >/dev/null
idem=${IDEM_BIN:-build/src/cli/idem}
targets=(rss_fill)
[[ -n ${IDEM_BIN:-} ]] || targets+=(idem)
IDEM_CMAKE_ARGS="-DIDEM_BUILD_BENCH=ON ${IDEM_CMAKE_ARGS:-}" scripts/build.sh "${targets[@]}"
[[ -x $idem ]] || { echo "bench/rss.sh: $idem is not an executable" >&2; exit 1; }

work="$root/build/bench-rss"
rm -rf "$work"
mkdir -p "$work"
store="rocksdb://$work/db"
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

export IDEM_TOKEN=bench IDEM_TENANTS="bench:bench"

# "1000000" → "1M", "1500000" → "1.5M", "250000" → "250k".
label() {
  awk -v n="$1" 'BEGIN {
    if (n >= 1000000) { s = sprintf("%.1f", n / 1000000); sub(/\.0$/, "", s); print s "M" }
    else if (n >= 1000) { s = sprintf("%.1f", n / 1000); sub(/\.0$/, "", s); print s "k" }
    else print n }'
}

rows="$work/rows.tsv"
: >"$rows"
filled=0
while (( filled < records )); do
  next=$(( filled + step > records ? records : filled + step ))
  line=$(build/bench/rss_fill --store "$store?sync=off" --from "$filled" --to "$next" --threads "$threads")
  echo "$line" >&2
  fill_rss=$(sed -n 's/.*rss_mib=\([0-9.]*\).*/\1/p' <<<"$line")
  filled=$next

  "$idem" --log-level warn serve --listen 127.0.0.1:0 --store "$store" \
    >"$work/serve.out" 2>"$work/serve.err" &
  server_pid=$!
  port=
  for _ in $(seq 1 600); do
    port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$work/serve.out" | head -1)
    [[ -n $port ]] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z $port ]]; then
    echo "bench/rss.sh: idem serve did not start at $filled records: $(tail -1 "$work/serve.err")" >&2
    exit 1
  fi
  for script in bench/claims/new_keys.lua bench/rss_old_keys.lua; do
    result=$(IDEM_BENCH_RUN="rss-$filled" IDEM_BENCH_RECORDS=$filled wrk -t2 -c16 -d"${warmup}s" \
      -s "$script" "http://127.0.0.1:$port/" 2>&1 | grep '^RESULT' || true)
    errors=$(sed -n 's/.*errors=\([0-9]*\).*/\1/p' <<<"$result")
    [[ ${errors:-1} == 0 ]] || echo "bench/rss.sh: warm-up $script at $filled records: ${result:-no result}" >&2
  done
  rss_kib=$(awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status")
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=
  disk_mib=$(du -sm "$work/db" | cut -f1)
  printf '%s\t%s\t%s\t%s\n' "$filled" "$rss_kib" "$fill_rss" "$disk_mib" >>"$rows"
done

awk -F'\t' -v first_label="$(label "$(head -1 "$rows" | cut -f1)")" \
    -v last_label="$(label "$(tail -1 "$rows" | cut -f1)")" '
  NR == 1 { base = $2 / 1024
            printf "%-12s %16s %14s %16s %12s\n", "records", "serve RSS MiB", "vs first %",
                   "filler RSS MiB", "disk MiB" }
  { rss = $2 / 1024; last = rss
    printf "%-12d %16.1f %+14.1f %16.1f %12d\n", $1, rss, (rss / base - 1) * 100, $3, $4 }
  END { printf "ratio rss_%s/rss_%s = %.2f\n", last_label, first_label, last / base }' "$rows"
