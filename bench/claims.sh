#!/usr/bin/env bash
# bench/claims.sh: durable claims through `idem serve` against what a team would use
# instead, measured in one run on this machine:
#   - idem serve, new keys (POST /v1/claims, a fresh key each), duplicates (the
#     same completed key) and claim+complete pairs (bench/pair_load), on its
#     embedded stores with durable settings
#     (sqlite:// synchronous=full; rocksdb:// when this build has it);
#   - Redis 7 SET k NX EX 86400 with no persistence, and with appendfsync always;
#   - PostgreSQL 15 durable (fsync, synchronous_commit) raw INSERT … ON CONFLICT DO
#     NOTHING through pgbench;
#   - bench/http_ceiling, a fixed-body Beast server: the HTTP ceiling.
# at 16 and 64 connections (wrk + Lua, redis-benchmark, pgbench). Prints one table
# (throughput, p50, p99, and the server's CPU time per operation: user + system of
# the server process, PostgreSQL's postmaster with its backends, over the cell,
# divided by the operations; the load generator's is not in it), then
# `ratio durable_claims/redis_setnx = X.XX` (idem's durable new-key claims ÷ Redis
# SET NX without persistence, both at 64 connections), writes claims.png (gnuplot)
# and stops everything it started by pid.
#
#   bench/claims.sh [--seconds N] [--quick]
#
# Installs what it needs with apt-get (wrk, gnuplot-nox and the test servers), builds
# into build/, works in build/bench-claims/. Run it alone: the machine's two cores
# are shared by the load generator and the server under test, so anything else
# running changes the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
source bench/lib.sh
root=$PWD
seconds=10
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --quick) seconds=3; shift ;;
    *) echo "bench/claims.sh: unknown option $1 (--seconds N, --quick)" >&2; exit 2 ;;
  esac
done

scripts/deps.sh
missing=()
for tool in wrk:wrk gnuplot:gnuplot-nox redis-benchmark:redis-tools pgbench:postgresql-contrib; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi
IDEM_CMAKE_ARGS="-DIDEM_BUILD_BENCH=ON ${IDEM_CMAKE_ARGS:-}" scripts/build.sh idem http_ceiling pair_load

work="$root/build/bench-claims"
rm -rf "$work"
mkdir -p "$work"
pids=()
services="$work/services"
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  IDEM_SERVICES="postgres redis" "$root/scripts/services.sh" stop "$services" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Starts `$@` in the background with stdout in $work/NAME.out, waits for its
# "listening on HOST:PORT" line and sets `port` (not in a subshell: the pid must
# reach `pids`, which the EXIT trap stops).
declare -A server_pid  # system name (as in the table) -> its server's pid
start_listening() {
  local name=$1; shift
  "$@" >"$work/$name.out" 2>"$work/$name.err" &
  local pid=$!
  pids+=("$pid")
  server_pid[$name]=$pid
  for _ in $(seq 1 300); do
    if grep -q "^listening on " "$work/$name.out" 2>/dev/null; then
      port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$work/$name.out" | head -1)
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "bench/claims.sh: $name did not start: $(tail -1 "$work/$name.err")" >&2
  return 1
}

IDEM_SERVICES="postgres redis" IDEM_SERVICES_DURABLE=1 scripts/services.sh start "$services" >/dev/null
# shellcheck source=/dev/null
source "$services/env.sh"
redis_port=${IDEM_TEST_REDIS_URL##*:}
redis_port=${redis_port%%/*}
# A second Redis that fsyncs every write (appendfsync always).
aof_port=$(free_port)
mkdir -p "$work/redis-aof"
redis-server --bind 127.0.0.1 --port "$aof_port" --dir "$work/redis-aof" --save "" \
  --appendonly yes --appendfsync always --daemonize no >"$work/redis-aof.log" 2>&1 &
pids+=($!)
server_pid[redis-aof]=$!
server_pid[redis]=$IDEM_TEST_REDIS_PID
server_pid[postgres]=$IDEM_TEST_POSTGRES_PID
for _ in $(seq 1 100); do redis-cli -p "$aof_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

pg_url=$IDEM_TEST_POSTGRES_URL
psql "$pg_url" -q -c "DROP TABLE IF EXISTS bench_keys; CREATE TABLE bench_keys (k bigint PRIMARY KEY)" >/dev/null

export IDEM_TOKEN=bench IDEM_TENANTS="bench:bench"
declare -A idem_port
# rocksdb:// where this build has it (else `idem serve` refuses the URL and the row
# is left out).
# rocksdb-group: the same store with RocksDB's own write groups (writer=group) instead
# of idem's single writer, the default (both are measured).
for entry in "sqlite:sqlite://$work/idem.db" "rocksdb:rocksdb://$work/idem-rocksdb" \
    "rocksdb-group:rocksdb://$work/idem-rocksdb-group?writer=group"; do
  name=${entry%%:*}
  if start_listening "idem-$name" build/src/cli/idem --log-level warn serve \
      --listen 127.0.0.1:0 --store "${entry#*:}"; then
    idem_port[$name]=$port
  else
    echo "bench/claims.sh: left out idem serve on $name" >&2
  fi
done
start_listening ceiling build/bench/http_ceiling --threads 2
ceiling_port=$port

results="$work/results.tsv"
: >"$results"
# The CPU a cell's server used: each record() reports the ticks since the last
# cpu_start of that server, divided by the operations it did.
clock_ticks=$(getconf CLK_TCK)
# cpu_ticks PID: user + system ticks of PID (all its threads) and of its children,
# the live ones and those it has reaped (PostgreSQL's backends are its children and
# exit when pgbench disconnects).
cpu_ticks() {
  # /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces, so the fields
  # are counted after the last ")": f[2] ppid, f[12] utime, f[13] stime, f[14]
  # cutime, f[15] cstime. A process that ends while this reads is left out.
  cat /proc/[0-9]*/stat 2>/dev/null | awk -v pid="$1" '
    {
      own = ($1 == pid)
      sub(/.*\) /, "")
      split($0, f, " ")
      if (own || f[2] == pid) total += f[12] + f[13] + f[14] + f[15]
    }
    END { print total + 0 }'
}
cpu_server=
cpu_before=0
cpu_start() {  # server name
  cpu_server=${server_pid[$1]:-}
  cpu_before=$([[ -n $cpu_server ]] && cpu_ticks "$cpu_server" || echo 0)
}
# Microseconds of server CPU per operation, for `ops` operations (empty when no
# cpu_start preceded it).
cpu_per_op() {  # ops
  [[ -n $cpu_server ]] || return 0
  sleep 0.2  # PostgreSQL reaps its backends after pgbench has gone
  local after
  after=$(cpu_ticks "$cpu_server")
  awk -v a="$after" -v b="$cpu_before" -v hz="$clock_ticks" -v ops="$1" \
    'BEGIN {if (ops > 0) printf "%.1f", (a - b) * 1e6 / hz / ops}'
}
# system workload conns rps p50 p99 [ops: default rps × seconds, for the load
# generators that run for `seconds`]
record() {
  local ops=${7:-$(awk -v r="$4" -v s="$seconds" 'BEGIN {printf "%d", r * s}')}
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$(cpu_per_op "$ops")" \
    >>"$results"
  cpu_server=
}

# Records the RESULT line `out` of wrk or pair_load: system workload conns out.
record_result() {
  local rps p50 p99 errors
  rps=$(sed -n 's/.*rps=\([0-9.]*\).*/\1/p' <<<"$4")
  p50=$(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' <<<"$4")
  p99=$(sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p' <<<"$4")
  errors=$(sed -n 's/.*errors=\([0-9]*\).*/\1/p' <<<"$4")
  [[ ${errors:-1} == 0 ]] || echo "bench/claims.sh: $1 $2 at $3 connections: ${errors:-no result, all} errors" >&2
  record "$1" "$2" "$3" "${rps:-0}" "${p50:-0}" "${p99:-0}"
}

# The server a table row's system names: "idem rocksdb" -> idem-rocksdb.
server_of() {
  case $1 in
    "idem "*) echo "idem-${1#idem }" ;;
    "http ceiling") echo ceiling ;;
    "redis no persistence") echo redis ;;
    "redis appendfsync always") echo redis-aof ;;
    *) echo "" ;;
  esac
}

run_wrk() {  # system workload conns port script
  cpu_start "$(server_of "$1")"
  record_result "$1" "$2" "$3" "$(IDEM_BENCH_RUN="$1-$3-$RANDOM" wrk -t2 -c"$3" -d"${seconds}s" \
    --latency -s "$5" "http://127.0.0.1:$4/" 2>&1 | grep '^RESULT' || true)"
}

run_pairs() {  # system conns port
  cpu_start "$(server_of "$1")"
  record_result "$1" "claim+complete" "$2" "$(build/bench/pair_load --port "$3" --token bench \
    --connections "$2" --seconds "$seconds" || true)"
}

run_redis() {  # system port conns
  local n=$((seconds * 60000)) line
  cpu_start "$(server_of "$1")"
  line=$(redis-benchmark -p "$2" -c "$3" -n "$n" -r 100000000 -q --csv \
    SET "k:__rand_int__" v NX EX 86400 2>/dev/null | tail -1)
  # "SET k:__rand_int__ v NX EX 86400","rps","avg","min","p50","p95","p99","max"
  IFS=, read -r _ rps _ _ p50 _ p99 _ <<<"${line//\"/}"
  record "$1" "SET NX" "$3" "$rps" "$p50" "$p99" "$n"  # -n: a count, not a duration
}

run_pg() {  # conns
  rm -f "$work"/pgbench_log.*
  cpu_start postgres
  local out tps
  if ! out=$(cd "$work" && pgbench -n -c "$1" -j 2 -T "$seconds" \
      -f "$root/bench/claims/pg_insert.sql" --log --log-prefix=pgbench_log "$pg_url" 2>&1); then
    echo "bench/claims.sh: pgbench failed: $(tail -2 <<<"$out")" >&2
    record "postgres durable" "INSERT ON CONFLICT" "$1" 0 0 0
    return
  fi
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)
  # Per-transaction latencies (µs, third column) from pgbench's logs.
  local sorted="$work/pg_latency.txt"
  cat "$work"/pgbench_log.* | awk '{print $3}' | sort -n >"$sorted"
  local count p50 p99
  count=$(wc -l <"$sorted")
  p50=$(awk -v n="$count" 'NR == int(n * 0.50) + 1 {printf "%.3f", $1 / 1000}' "$sorted")
  p99=$(awk -v n="$count" 'NR == int(n * 0.99) + 1 {printf "%.3f", $1 / 1000}' "$sorted")
  record "postgres durable" "INSERT ON CONFLICT" "$1" "${tps:-0}" "${p50:-0}" "${p99:-0}"
}

# A completed key for the duplicate workload, on each idem store.
dup_key="dup-$RANDOM"
for name in "${!idem_port[@]}"; do
  complete_key "${idem_port[$name]}" "$dup_key"
done
export IDEM_BENCH_KEY=$dup_key

for conns in 16 64; do
  for name in "${!idem_port[@]}"; do
    echo "bench/claims.sh: idem serve $name, $conns connections" >&2
    run_wrk "idem $name" "new keys" "$conns" "${idem_port[$name]}" bench/claims/new_keys.lua
    run_wrk "idem $name" "duplicates" "$conns" "${idem_port[$name]}" bench/claims/duplicates.lua
    run_pairs "idem $name" "$conns" "${idem_port[$name]}"
  done
  echo "bench/claims.sh: HTTP ceiling, Redis, PostgreSQL, $conns connections" >&2
  run_wrk "http ceiling" "fixed body" "$conns" "$ceiling_port" bench/claims/duplicates.lua
  run_redis "redis no persistence" "$redis_port" "$conns"
  run_redis "redis appendfsync always" "$aof_port" "$conns"
  run_pg "$conns"
done

value() {  # system workload conns
  awk -F'\t' -v s="$1" -v w="$2" -v c="$3" '$1 == s && $2 == w && $3 == c {print $4}' "$results"
}
best_idem=$(awk -F'\t' '$1 ~ /^idem / && $2 == "new keys" && $3 == 64 {print $4 "\t" $1}' "$results" |
  sort -rn | head -1 | cut -f2)

# Claim latency at half of the best store's peak: new-key claims in an open loop
# (pair_load --rate, latency from each request's due time) at 64 connections.
half=$(awk -v p="$(value "$best_idem" "new keys" 64)" 'BEGIN {printf "%d", p / 2}')
if [[ -n $best_idem && $half -gt 0 ]]; then
  echo "bench/claims.sh: $best_idem, new keys at $half/s (half of its peak)" >&2
  cpu_start "$(server_of "$best_idem")"
  record_result "$best_idem" "new keys @ half peak" 64 "$(build/bench/pair_load \
    --port "${idem_port[${best_idem#idem }]}" --token bench --connections 64 \
    --seconds "$seconds" --claims-only --rate "$half" || true)"
fi

printf '\n%-26s %-20s %6s %12s %9s %9s %11s\n' system workload conns "ops/s" "p50 ms" "p99 ms" \
  "cpu us/op"
while IFS=$'\t' read -r system workload conns rps p50 p99 cpu; do
  printf '%-26s %-20s %6s %12.0f %9.3f %9.3f %11s\n' "$system" "$workload" "$conns" "$rps" "$p50" \
    "$p99" "${cpu:--}"
done <"$results"

redis=$(value "redis no persistence" "SET NX" 64)
idem=$(value "$best_idem" "new keys" 64)
dups=$(value "$best_idem" "duplicates" 64)
ceiling=$(value "http ceiling" "fixed body" 64)
pg=$(value "postgres durable" "INSERT ON CONFLICT" 64)
echo
awk -v a="$dups" -v b="$ceiling" 'BEGIN {if (b > 0) printf "ratio duplicates/http_ceiling = %.2f\n", a / b}'
half_p99=$(awk -F'\t' -v s="$best_idem" '$1 == s && $2 == "new keys @ half peak" {print $6}' "$results")
[[ -z $half_p99 ]] || echo "claim p99 at half of peak = $half_p99 ms ($best_idem, target <= 2 ms)"
awk -v a="$idem" -v b="$pg" 'BEGIN {if (b > 0) printf "ratio durable_claims/postgres_insert = %.2f\n", a / b}'
awk -v a="$idem" -v b="$redis" -v s="$best_idem" \
  'BEGIN {if (b > 0) printf "ratio durable_claims/redis_setnx = %.2f (%s)\n", a / b, s}'

# Throughput by system and connections, as clustered bars.
awk -F'\t' '{printf "\"%s, %s\"\t%s\t%s\n", $1, $2, $3, $4}' "$results" >"$work/plot.tsv"
gnuplot <<EOF
set terminal pngcairo size 1200,600 noenhanced
set output "$work/claims.png"
set datafile separator "\t"
set style data histograms
set style histogram clustered
set style fill solid 0.8
set ylabel "operations per second"
set xtics rotate by -30
set key top right
set title "claims on this machine, one run (${seconds}s per cell)"
plot "< awk -F'\t' '\$2 == 16' $work/plot.tsv" using 3:xtic(1) title "16 connections", \
     "< awk -F'\t' '\$2 == 64' $work/plot.tsv" using 3 title "64 connections"
EOF
echo "plot: $work/claims.png; table: $results" >&2
