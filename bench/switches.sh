#!/usr/bin/env bash
# bench/switches.sh: context switches per request of `idem serve` on rocksdb://, by
# thread name, beside wrk's throughput and latency. On a VM where a switch costs
# more than a claim (docs/benchmarks.md, "Claims without the worker pool"), this is
# the number that says whether a request hops between threads.
#
#   bench/switches.sh [--workload new_keys|duplicates] [--connections C] [--seconds N]
#                     [--bin PATH]
#
# Starts PATH (default build/src/cli/idem, built first) with `serve --store
# rocksdb://…` on a fresh store under build/bench-switches/, completes the key the
# duplicates workload repeats, warms up for 2 s, then runs wrk (2 threads,
# bench/claims/WORKLOAD.lua) for N seconds (default 8) at C connections (default
# 64), reading every thread's voluntary + nonvoluntary switches from
# /proc/PID/task/*/status before and after. Prints wrk's RESULT line, then one line
# per thread name: switches per request. Stops the server by pid.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
source bench/lib.sh
workload=new_keys
conns=64
seconds=8
bin=
while [[ $# -gt 0 ]]; do
  case $1 in
    --workload) workload=$2; shift 2 ;;
    --connections) conns=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "bench/switches.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -f bench/claims/$workload.lua ]] || { echo "bench/switches.sh: no workload bench/claims/$workload.lua" >&2; exit 2; }
[[ $conns =~ ^[0-9]+$ && $conns -gt 0 && $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] ||
  { echo "bench/switches.sh: --connections and --seconds take positive integers" >&2; exit 2; }
command -v wrk >/dev/null || apt-get install -y --no-install-recommends wrk >/dev/null
if [[ -z $bin ]]; then
  scripts/build.sh idem >/dev/null
  bin=build/src/cli/idem
fi

serve_setup bench-switches
pid=
cleanup() { [[ -z $pid ]] || { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; } || true; }
trap cleanup EXIT
"$bin" --log-level warn serve --listen "127.0.0.1:$port" --store "rocksdb://$work/db" \
  >"$work/serve.out" 2>"$work/serve.err" &
pid=$!
for _ in $(seq 1 300); do
  grep -q "^listening on " "$work/serve.out" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { echo "idem serve did not start: $(tail -1 "$work/serve.err")" >&2; exit 1; }
  sleep 0.1
done
url=http://127.0.0.1:$port
complete_key "$port" dup
IDEM_BENCH_RUN=warm$RANDOM wrk -t2 -c"$conns" -d2s -s "bench/claims/$workload.lua" "$url" >/dev/null 2>&1
# Switches by thread name: "name total" lines, summed over the threads of a name.
snapshot() {
  for task in /proc/"$pid"/task/*; do
    printf '%s %s\n' "$(tr ' ' _ <"$task/comm")" \
      "$(awk '/ctxt_switches/ {s += $2} END {print s}' "$task/status")"
  done | awk '{n[$1] += $2} END {for (k in n) print k, n[k]}' | sort
}
snapshot >"$work/before"
out=$(IDEM_BENCH_RUN=run$RANDOM wrk -t2 -c"$conns" -d"${seconds}s" -s "bench/claims/$workload.lua" \
  --latency "$url" 2>&1)
snapshot >"$work/after"
requests=$(awk '/requests in/ {print $1}' <<<"$out")
grep '^RESULT' <<<"$out"
join "$work/before" "$work/after" |
  awk -v r="$requests" '{printf "  %-16s %.2f switches/request\n", $1, ($3 - $2) / r}'
