#!/usr/bin/env bash
# bench/waiters.sh: what 1,000 waiters on one key cost. Per store
# (PostgreSQL durable from scripts/services.sh with IDEM_SERVICES_DURABLE=1, and
# rocksdb:// with its durable defaults), `idem serve` is started and
#   1. unrelated new-key claims (wrk, bench/claims/new_keys.lua, --connections
#      connections, --seconds seconds) are measured alone;
#   2. bench/waiters.py claims the key "hot" and holds it, and keeps --waiters
#      connections waiting on it (POST /v1/claims with wait_ms=30000, asked again
#      as each wait ends); the same wrk run is measured again meanwhile, and the
#      server's idem_claim_polls_total (/metrics: the record reads of waiting
#      claims) is read before and after it.
# Prints a table (p50 alone and with the waiters, the change in %, throughput, reads
# per waiter per second) and last `ratio waiter_p50_shift = X.XX`: the largest
# p50-with-waiters ÷ p50-alone over the stores (target ≤ 1.20; reads target ≤ 4 per
# waiter per second, one per ~250 ms).
#
#   bench/waiters.sh [--waiters N] [--seconds N] [--connections N] [--stores "postgres rocksdb"]
#
# Builds idem into build/ (unless IDEM_BIN names an idem binary to run instead),
# works in build/bench-waiters/ (removed first), stops what
# it started by pid. Run it alone: wrk, the waiters and the server share the cores.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
waiters=1000
seconds=10
connections=16
stores="postgres rocksdb"
while [[ $# -gt 0 ]]; do
  case $1 in
    --waiters) waiters=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --stores) stores=$2; shift 2 ;;
    *) echo "bench/waiters.sh: unknown option $1 (--waiters N, --seconds N, --connections N, --stores LIST)" >&2
       exit 2 ;;
  esac
done
for v in "$waiters" "$seconds" "$connections"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench/waiters.sh: options take positive integers, got '$v'" >&2; exit 2; }
done
for s in $stores; do
  [[ $s == postgres || $s == rocksdb ]] || { echo "bench/waiters.sh: unknown store '$s' (postgres, rocksdb)" >&2; exit 2; }
done
# One descriptor per waiter, in this shell's children (waiters.py, idem serve).
ulimit -n "$(ulimit -Hn)"
(( $(ulimit -n) > waiters + 256 )) || { echo "bench/waiters.sh: the descriptor limit $(ulimit -n) is too low for $waiters waiters" >&2; exit 1; }

command -v wrk >/dev/null || apt-get install -y --no-install-recommends wrk >/dev/null
idem=${IDEM_BIN:-build/src/cli/idem}
[[ -n ${IDEM_BIN:-} ]] || scripts/build.sh idem
[[ -x $idem ]] || { echo "bench/waiters.sh: $idem is not an executable" >&2; exit 1; }

work="$root/build/bench-waiters"
rm -rf "$work"
mkdir -p "$work"
services="$work/services"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ -f $services/env.sh ]]; then
    IDEM_SERVICES=postgres "$root/scripts/services.sh" stop "$services" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

export IDEM_TOKEN=bench IDEM_TENANTS="bench:bench"
if [[ " $stores " == *" postgres "* ]]; then
  IDEM_SERVICES=postgres IDEM_SERVICES_DURABLE=1 scripts/services.sh start "$services" >/dev/null
  # shellcheck source=/dev/null
  source "$services/env.sh"
fi

# Waits for `pattern` in `file` while `pid` lives (up to 60 s).
wait_for() {  # file pattern pid what
  for _ in $(seq 1 600); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || break
    sleep 0.1
  done
  echo "bench/waiters.sh: $4 did not start: $(tail -1 "${1%.out}.err" 2>/dev/null)" >&2
  return 1
}

polls() {  # port
  curl -sf "http://127.0.0.1:$1/metrics" | awk '$1 == "idem_claim_polls_total" {print $2}'
}

run_wrk() {  # port run → "rps p50_ms"
  local line
  line=$(IDEM_BENCH_RUN="$2-$RANDOM" wrk -t2 -c"$connections" -d"${seconds}s" --latency \
    -s bench/claims/new_keys.lua "http://127.0.0.1:$1/" 2>&1 | grep '^RESULT' || true)
  local errors
  errors=$(sed -n 's/.*errors=\([0-9]*\).*/\1/p' <<<"$line")
  [[ ${errors:-1} == 0 ]] || echo "bench/waiters.sh: wrk $2: ${line:-no result}" >&2
  echo "$(sed -n 's/.*rps=\([0-9.]*\).*/\1/p' <<<"$line") $(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' <<<"$line")"
}

rows="$work/rows.tsv"
: >"$rows"
for s in $stores; do
  case $s in
    postgres) url=$IDEM_TEST_POSTGRES_URL ;;
    rocksdb) url="rocksdb://$work/rocksdb" ;;
  esac
  "$idem" --log-level warn serve --listen 127.0.0.1:0 --store "$url" \
    >"$work/serve-$s.out" 2>"$work/serve-$s.err" &
  server=$!
  pids+=("$server")
  wait_for "$work/serve-$s.out" "^listening on " "$server" "idem serve on $s"
  port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$work/serve-$s.out" | head -1)

  read -r rps_alone p50_alone <<<"$(run_wrk "$port" "alone-$s")"

  python3 bench/waiters.py --port "$port" --token bench --waiters "$waiters" --key "hot-$s-$RANDOM" \
    >"$work/waiters-$s.out" 2>"$work/waiters-$s.err" &
  driver=$!
  pids+=("$driver")
  wait_for "$work/waiters-$s.out" "^READY" "$driver" "waiters.py on $s"
  sleep 2  # let the first waits reach their polling rhythm
  polls0=$(polls "$port"); t0=$(date +%s.%N)
  read -r rps_with p50_with <<<"$(run_wrk "$port" "with-$s")"
  polls1=$(polls "$port"); t1=$(date +%s.%N)
  kill "$driver"; wait "$driver" || true
  kill "$server"; wait "$server" 2>/dev/null || true
  summary=$(grep '^WAITERS' "$work/waiters-$s.out" || echo "WAITERS none")
  echo "bench/waiters.sh: $s: $summary" >&2
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$s" "$p50_alone" "$p50_with" "$rps_alone" "$rps_with" \
    "$(awk -v a="$polls0" -v b="$polls1" -v t0="$t0" -v t1="$t1" -v n="$waiters" \
         'BEGIN {printf "%.3f", (b - a) / n / (t1 - t0)}')" >>"$rows"
done

awk -F'\t' -v n="$waiters" '
  BEGIN { printf "%-10s %12s %14s %9s %11s %13s %18s\n", "store", "p50 alone ms",
          "p50 waiters ms", "p50 Δ %", "rps alone", "rps waiters", "reads/waiter/s" }
  { r = ($2 > 0) ? $3 / $2 : 0; if (r > worst) worst = r
    printf "%-10s %12.3f %14.3f %+9.1f %11.0f %13.0f %18.3f\n", $1, $2, $3, (r - 1) * 100, $4, $5, $6 }
  END { printf "(%d waiters on one held key; reads = idem_claim_polls_total over the loaded interval)\n", n
        printf "ratio waiter_p50_shift = %.2f\n", worst }' "$rows"
