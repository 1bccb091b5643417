#!/usr/bin/env bash
# bench/profile_claims.sh: instructions and heap allocations per request of `idem
# serve` on rocksdb://, counted by callgrind (repeatable whatever else the machine
# runs, unlike a throughput number), for the duplicate path and the new-key path.
#
#   bench/profile_claims.sh [--seconds N] [--connections C]
#
# Starts `idem serve` under valgrind --tool=callgrind on a fresh store in
# build/bench-profile/, completes one key, drives it with wrk (bench/claims/*.lua)
# for N seconds (default 20) at C connections (default 8), stops it, and prints
# requests, instructions and instructions per request, and the calls to malloc,
# calloc, realloc and the aligned allocators (operator new's included: it calls
# malloc) per request, for each workload (counted from the end of the setup to the
# end of the load only), then the
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
trap 'exit 130' INT TERM  # runs the EXIT trap

# mallocs FILE: the calls to the C allocators a callgrind file records. Function
# names are compressed: "(id) name" the first time, "(id)" after; a call is a
# "cfn=" line (the callee) followed by "calls=COUNT …".
mallocs() {
  awk '
    function fn_name(spec,   id, rest) {
      if (!match(spec, /^\([0-9]+\)/)) return spec
      id = substr(spec, 2, RLENGTH - 2)
      rest = substr(spec, RLENGTH + 2)
      if (rest != "") names[id] = rest
      return names[id]
    }
    /^fn=/ { fn_name(substr($0, 4)) }
    /^cfn=/ { callee = fn_name(substr($0, 5)) }
    /^calls=/ {
      split(substr($0, 7), count, " ")
      if (callee ~ /^(malloc|calloc|realloc|memalign|aligned_alloc|posix_memalign)(\x27[0-9]+)?$/)
        total += count[1]
    }
    END { print total + 0 }' "$1"
}

printf '%-12s %10s %16s %14s %12s %14s\n' workload requests instructions "instr/request" mallocs \
  "mallocs/request"
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
  allocs=$(mallocs "$out.callgrind")
  printf '%-12s %10d %16d %14d %12d %14.1f\n' "$workload" "$requests" "$total" \
    $((total / (requests > 0 ? requests : 1))) "$allocs" \
    "$(awk -v a="$allocs" -v r="$requests" 'BEGIN {print (r > 0 ? a / r : 0)}')"
done
for workload in duplicates new_keys; do
  echo
  echo "$workload: the costliest of idem's own functions (inclusive)"
  callgrind_annotate --inclusive=yes "$work/$workload.callgrind" 2>/dev/null |
    grep -E ' (src|/work/[^ ]*/src)/[a-z_/]*\.cc:idem::' | grep -v '^ *[0-9,]* *(9[0-9]\.' |
    head -10 | sed -E 's/\[[^]]*\]$//' | cut -c1-150
done
