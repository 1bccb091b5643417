#!/usr/bin/env bash
# bench/profile_claims.sh: instructions per request of `idem serve` on rocksdb://,
# counted by callgrind (repeatable whatever else the machine runs, unlike a
# throughput number), for the duplicate path and the new-key path.
#
#   bench/profile_claims.sh [--seconds N] [--connections C]
#
# Starts `idem serve` under valgrind --tool=callgrind on a fresh store in
# build/bench-profile/, completes one key, drives it with wrk (bench/claims/*.lua)
# for N seconds (default 20) at C connections (default 8), stops it, and prints
# requests, instructions and instructions per request for each workload (counted
# from the end of the setup to the end of the load only), then the
# ten most expensive functions (inclusive) of idem's own code. The callgrind files
# stay in build/bench-profile/ for callgrind_annotate or kcachegrind.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
source bench/lib.sh
seconds=20
conns=8
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --connections) conns=$2; shift 2 ;;
    *) echo "bench/profile_claims.sh: unknown option $1 (--seconds N, --connections C)" >&2
       exit 2 ;;
  esac
done
missing=()
for tool in wrk:wrk valgrind:valgrind curl:curl; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi
scripts/build.sh idem >/dev/null

serve_setup bench-profile
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null || true; }
trap cleanup EXIT

printf '%-12s %10s %16s %14s\n' workload requests instructions "instr/request"
for workload in duplicates new_keys; do
  out="$work/$workload"
  valgrind --tool=callgrind --callgrind-out-file="$out.callgrind" build/src/cli/idem \
    --log-level warn serve --listen "127.0.0.1:$port" --store "rocksdb://$out.db" \
    >"$out.serve.out" 2>"$out.serve.err" &
  pid=$!
  for _ in $(seq 1 600); do
    grep -q "^listening on " "$out.serve.out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { echo "idem serve did not start: $(tail -1 "$out.serve.err")" >&2; exit 1; }
    sleep 0.1
  done
  complete_key "$port" dup
  # Only the load is counted: the counters are zeroed after start-up and the setup
  # requests, and dumped (to $out.callgrind.1) when wrk is done, before shutdown.
  # Counting the whole process made a slower run's requests look dearer, since the
  # start-up (the RocksDB open) was spread over fewer of them.
  callgrind_control --zero "$pid" >/dev/null 2>&1
  summary=$(wrk -t1 -c"$conns" -d"${seconds}s" -s "bench/claims/$workload.lua" \
    "http://127.0.0.1:$port/" 2>&1 || true)
  callgrind_control --dump="after wrk" "$pid" >/dev/null 2>&1
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
  requests=$(sed -n 's/^ *\([0-9]*\) requests in .*/\1/p' <<<"$summary")
  [[ -n $requests ]] || { echo "wrk printed no request count: $summary" >&2; exit 1; }
  mv "$out.callgrind.1" "$out.callgrind"
  total=$(callgrind_annotate "$out.callgrind" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
  printf '%-12s %10d %16d %14d\n' "$workload" "$requests" "$total" $((total / (requests > 0 ? requests : 1)))
done
for workload in duplicates new_keys; do
  echo
  echo "$workload: the costliest of idem's own functions (inclusive)"
  callgrind_annotate --inclusive=yes "$work/$workload.callgrind" 2>/dev/null |
    grep -E ' (src|/work/[^ ]*/src)/[a-z_/]*\.cc:idem::' | grep -v '^ *[0-9,]* *(9[0-9]\.' |
    head -10 | sed -E 's/\[[^]]*\]$//' | cut -c1-150
done
