#!/usr/bin/env bash
# bench/claims.sh: the durable-claims engine against its targets, and against what a
# team would use instead, measured in one run on this machine:
#   - idem serve, new keys (POST /v1/claims, a fresh key each), duplicates (the
#     same completed key) and claim+complete pairs (bench/pair_load), on its
#     embedded stores with durable settings (rocksdb://; --stores adds sqlite://
#     with synchronous=full, rocksdb-group, RocksDB's own write groups, and
#     rocksdb-inline and rocksdb-stage, turn_write=inline and stage instead of the
#     default auto);
#   - POST /v1/claims/batch with 100 new-key claims a request (keys/s), when the
#     server answers it (else the row says "not available");
#   - Redis 7 SET k NX EX 86400 with no persistence, and with appendfsync always;
#   - PostgreSQL 15 durable (fsync, synchronous_commit) raw INSERT … ON CONFLICT DO
#     NOTHING through pgbench;
#   - nginx (nginx-light, one worker, `return 200` with a body the size of idem's
#     duplicate answer): the HTTP ceiling a well-known lean server sets; and
#     bench/http_ceiling, a fixed-body Beast server;
#   - the claim p99 at half of the default store's peak (bench/pair_load --rate, open
#     loop), and a bare append + fdatasync of 4 KiB on the same disk
#     (bench/fsync_probe.py), the floor under it.
# at 16 and 64 connections (wrk + Lua, redis-benchmark, pgbench). Every server runs
# on CPU 0 and every load generator on CPU 1 (taskset; PostgreSQL's backends and
# nginx's worker inherit the postmaster's and the master's CPU), so a cell's
# numbers do not depend on how the scheduler shared the cores. Prints one table
# (throughput, p50, p99, and the server's CPU time per operation: user + system of
# the server's processes, PostgreSQL's postmaster with its backends, nginx's master
# with its worker, over the cell, divided by the operations; the load generator's
# is not in it), then one line per target, `ratio NAME = X.XX (target ≥ Y)`,
# writes claims.png (gnuplot) and stops everything it started by pid.
#
#   bench/claims.sh [--seconds N] [--quick]
#                   [--stores "rocksdb sqlite rocksdb-group rocksdb-inline rocksdb-stage"]
#                   [--no-pin]
#
# Installs what it needs (scripts/deps.sh --bench), builds into build/, works in
# build/bench-claims/. Run it alone: with two cores, anything else running takes
# CPU 0 or 1 from the server or its load generator (the load average is printed
# at the start and the end).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
source bench/lib.sh
root=$PWD
seconds=10
stores="rocksdb"
pin=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --quick) seconds=3; shift ;;
    --stores) stores=$2; shift 2 ;;
    --no-pin) pin=0; shift ;;
    *) echo "bench/claims.sh: unknown option $1 (--seconds N, --quick, --stores LIST, --no-pin)" >&2
       exit 2 ;;
  esac
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || {
  echo "bench/claims.sh: --seconds must be a whole number ≥ 1, not '$seconds'" >&2
  exit 2
}
for name in $stores; do
  case $name in
    sqlite|rocksdb|rocksdb-group|rocksdb-inline|rocksdb-stage) ;;
    *) echo "bench/claims.sh: --stores: unknown store '$name' (sqlite, rocksdb, rocksdb-group, rocksdb-inline, rocksdb-stage)" >&2
       exit 2 ;;
  esac
done

# Servers on CPU 0, load generators on CPU 1; one thread each for the generators
# and one I/O thread for the HTTP servers (a second thread on the same core only
# adds switches). Unpinned (--no-pin, or fewer than two CPUs): both on every core.
on_server=()
on_load=()
threads=2
if [[ $pin == 1 ]]; then
  if [[ $(nproc) -ge 2 ]]; then
    on_server=(taskset -c 0)
    on_load=(taskset -c 1)
    threads=1
  else
    echo "bench/claims.sh: $(nproc) CPU: servers and load generators not pinned" >&2
  fi
fi
echo "bench/claims.sh: load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

scripts/deps.sh --bench
IDEM_CMAKE_ARGS="${IDEM_CMAKE_ARGS:-} -DIDEM_BUILD_BENCH=ON" \
  scripts/build.sh idem http_ceiling pair_load

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
trap 'exit 130' INT TERM  # runs the EXIT trap

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

# PostgreSQL's and Redis's processes inherit CPU 0 from services.sh.
IDEM_SERVICES="postgres redis" IDEM_SERVICES_DURABLE=1 "${on_server[@]}" scripts/services.sh \
  start "$services" >/dev/null
# shellcheck source=/dev/null
source "$services/env.sh"
redis_port=${IDEM_TEST_REDIS_URL##*:}
redis_port=${redis_port%%/*}
# A second Redis that fsyncs every write (appendfsync always).
aof_port=$(free_port)
mkdir -p "$work/redis-aof"
"${on_server[@]}" redis-server --bind 127.0.0.1 --port "$aof_port" --dir "$work/redis-aof" \
  --save "" --appendonly yes --appendfsync always --daemonize no >"$work/redis-aof.log" 2>&1 &
pids+=($!)
server_pid[redis-aof]=$!
server_pid[redis]=$IDEM_TEST_REDIS_PID
server_pid[postgres]=$IDEM_TEST_POSTGRES_PID
for _ in $(seq 1 100); do redis-cli -p "$aof_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

pg_url=$IDEM_TEST_POSTGRES_URL
psql "$pg_url" -q -c "DROP TABLE IF EXISTS bench_keys; CREATE TABLE bench_keys (k bigint PRIMARY KEY)" >/dev/null

export IDEM_TOKEN=bench IDEM_TENANTS="bench:bench"
declare -A idem_port
declare -A store_url
store_url[sqlite]="sqlite://$work/idem.db"
store_url[rocksdb]="rocksdb://$work/idem-rocksdb"
store_url[rocksdb-group]="rocksdb://$work/idem-rocksdb-group?writer=group"
store_url[rocksdb-inline]="rocksdb://$work/idem-rocksdb-inline?turn_write=inline"
store_url[rocksdb-stage]="rocksdb://$work/idem-rocksdb-stage?turn_write=stage"
# A store this build lacks (rocksdb://) is refused by `idem serve` and left out.
for name in $stores; do
  if start_listening "idem-$name" "${on_server[@]}" build/src/cli/idem --log-level warn serve \
      --listen 127.0.0.1:0 --io-threads "$threads" --store "${store_url[$name]}"; then
    idem_port[$name]=$port
  else
    echo "bench/claims.sh: left out idem serve on $name" >&2
  fi
done
[[ ${#idem_port[@]} -gt 0 ]] || { echo "bench/claims.sh: no idem serve started" >&2; exit 1; }
start_listening ceiling "${on_server[@]}" build/bench/http_ceiling --threads "$threads"
ceiling_port=$port

# A completed key for the duplicate workload, on each idem store, and the size of
# the duplicate answer's body (nginx answers a body of that size).
dup_key="dup-$RANDOM"
for name in "${!idem_port[@]}"; do
  complete_key "${idem_port[$name]}" "$dup_key"
done
export IDEM_BENCH_KEY=$dup_key
first_store=${!idem_port[*]}
first_store=${first_store%% *}
dup_size=$(curl -s -o /dev/null -w '%{size_download}' -X POST -H "Authorization: Bearer bench" \
  -d "{\"biz_type\":\"bench\",\"key\":\"$dup_key\"}" \
  "http://127.0.0.1:${idem_port[$first_store]}/v1/claims")
[[ $dup_size =~ ^[1-9][0-9]*$ ]] || {
  echo "bench/claims.sh: the duplicate claim of $dup_key on idem-$first_store got no body" >&2
  exit 1
}

# nginx: one worker, a fixed body, no access log, keep-alive without a request
# limit; its files under $work/nginx, run as nobody when this script is root.
nginx_dir="$work/nginx"
mkdir -p "$nginx_dir"
nginx_port=$(free_port)
cat >"$nginx_dir/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $nginx_dir/nginx.pid;
error_log $nginx_dir/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  client_body_temp_path $nginx_dir/body;
  proxy_temp_path $nginx_dir/proxy;
  fastcgi_temp_path $nginx_dir/fastcgi;
  uwsgi_temp_path $nginx_dir/uwsgi;
  scgi_temp_path $nginx_dir/scgi;
  server {
    listen 127.0.0.1:$nginx_port;
    default_type application/json;
    location / { return 200 '$(head -c "$dup_size" /dev/zero | tr '\0' x)'; }
  }
}
NGINX
as_user=()
if [[ $(id -u) == 0 ]]; then
  chown -R nobody:nogroup "$nginx_dir"
  as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
# taskset and setpriv exec: $! is nginx's master.
"${on_server[@]}" "${as_user[@]}" nginx -p "$nginx_dir" -e "$nginx_dir/error.log" \
  -c "$nginx_dir/nginx.conf" >"$work/nginx.out" 2>&1 &
pids+=($!)
server_pid[nginx]=$!
for _ in $(seq 1 100); do
  curl -s -o /dev/null "http://127.0.0.1:$nginx_port/" && break
  sleep 0.1
done
curl -s -o /dev/null "http://127.0.0.1:$nginx_port/" || {
  echo "bench/claims.sh: nginx did not start: $(cat "$work/nginx.out" "$nginx_dir/error.log")" >&2
  exit 1
}

# POST /v1/claims/batch: measured when the server answers it with a 2xx.
batch_size=100
batch_status=$(curl -s -o "$work/batch-probe.out" -w '%{http_code}' -X POST \
  -H "Authorization: Bearer bench" -H "Content-Type: application/json" \
  -d '{"requests":[{"op":"claim","biz_type":"bench","key":"batch-probe","fingerprint":"fp"}]}' \
  "http://127.0.0.1:${idem_port[$first_store]}/v1/claims/batch")
batch=0
[[ $batch_status == 2?? ]] && batch=1
export IDEM_BENCH_BATCH=$batch_size  # bench/claims/batch.lua

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
# Every cell starts on a quiet disk: what the cells before it left to write
# (PostgreSQL's checkpoint, Redis's AOF, the other stores' flushes) is written out
# first, or a durable cell's fsyncs would wait behind another system's writeback.
checkpoint_failed=0
settle_disk() {
  local out
  if [[ -n ${pg_url:-} ]] && ! out=$(psql -qX -c CHECKPOINT "$pg_url" 2>&1) &&
      [[ $checkpoint_failed == 0 ]]; then
    checkpoint_failed=1
    echo "bench/claims.sh: PostgreSQL's CHECKPOINT before a cell failed: $out" >&2
  fi
  sync
}
cpu_start() {  # server name
  settle_disk
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

# Records the RESULT line `out` of wrk or pair_load: system workload conns out
# [per: operations per request, default 1; rps is multiplied by it].
record_result() {
  local rps p50 p99 errors
  rps=$(sed -n 's/.*rps=\([0-9.]*\).*/\1/p' <<<"$4")
  p50=$(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' <<<"$4")
  p99=$(sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p' <<<"$4")
  errors=$(sed -n 's/.*errors=\([0-9]*\).*/\1/p' <<<"$4")
  [[ ${errors:-1} == 0 ]] || echo "bench/claims.sh: $1 $2 at $3 connections: ${errors:-no result, all} errors" >&2
  record "$1" "$2" "$3" "$(awk -v r="${rps:-0}" -v n="${5:-1}" 'BEGIN {printf "%.1f", r * n}')" \
    "${p50:-0}" "${p99:-0}"
}

# The server a table row's system names: "idem rocksdb" -> idem-rocksdb.
server_of() {
  case $1 in
    "idem "*) echo "idem-${1#idem }" ;;
    "http ceiling") echo ceiling ;;
    "nginx") echo nginx ;;
    "redis no persistence") echo redis ;;
    "redis appendfsync always") echo redis-aof ;;
    *) echo "" ;;
  esac
}

run_wrk() {  # system workload conns port script [operations per request]
  cpu_start "$(server_of "$1")"
  record_result "$1" "$2" "$3" "$(IDEM_BENCH_RUN="$1-$3-$RANDOM" "${on_load[@]}" wrk \
    -t"$threads" -c"$3" -d"${seconds}s" --latency -s "$5" "http://127.0.0.1:$4/" 2>&1 |
    grep '^RESULT' || true)" "${6:-1}"
}

run_pairs() {  # system conns port
  cpu_start "$(server_of "$1")"
  record_result "$1" "claim+complete" "$2" "$("${on_load[@]}" build/bench/pair_load --port "$3" \
    --token bench --connections "$2" --seconds "$seconds" --threads "$threads" || true)"
}

# redis_benchmark PORT CONNS COUNT: the CSV line of COUNT SET NX of fresh keys:
# "SET k:__rand_int__ v NX EX 86400","rps","avg","min","p50","p95","p99","max".
redis_benchmark() {
  "${on_load[@]}" redis-benchmark -p "$1" -c "$2" -n "$3" -r 100000000 -q --csv \
    SET "k:__rand_int__" v NX EX 86400 2>/dev/null | tail -1 | tr -d '"'
}

run_redis() {  # system port conns
  # redis-benchmark runs a count, not a duration: a first 5,000 give the rate that
  # sizes a cell of about `seconds` (appendfsync always is 5-30x slower).
  local n rps p50 p99
  IFS=, read -r _ rps _ <<<"$(redis_benchmark "$2" "$3" 5000)"
  n=$(awk -v r="${rps:-0}" -v s="$seconds" 'BEGIN {n = int(r * s); print (n < 5000 ? 5000 : n)}')
  cpu_start "$(server_of "$1")"
  IFS=, read -r _ rps _ _ p50 _ p99 _ <<<"$(redis_benchmark "$2" "$3" "$n")"
  record "$1" "SET NX" "$3" "${rps:-0}" "${p50:-0}" "${p99:-0}" "$n"
}

run_pg() {  # conns
  rm -f "$work"/pgbench_log.*
  cpu_start postgres
  local out tps
  if ! out=$(cd "$work" && "${on_load[@]}" pgbench -n -c "$1" -j "$threads" -T "$seconds" \
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

batch_workload="batch of $batch_size, keys"
for conns in 16 64; do
  for name in "${!idem_port[@]}"; do
    echo "bench/claims.sh: idem serve $name, $conns connections" >&2
    run_wrk "idem $name" "new keys" "$conns" "${idem_port[$name]}" bench/claims/new_keys.lua
    run_wrk "idem $name" "duplicates" "$conns" "${idem_port[$name]}" bench/claims/duplicates.lua
    run_pairs "idem $name" "$conns" "${idem_port[$name]}"
  done
  echo "bench/claims.sh: nginx, HTTP ceiling, Redis, PostgreSQL, $conns connections" >&2
  run_wrk "nginx" "fixed body" "$conns" "$nginx_port" bench/claims/duplicates.lua
  run_wrk "http ceiling" "fixed body" "$conns" "$ceiling_port" bench/claims/duplicates.lua
  run_redis "redis no persistence" "$redis_port" "$conns"
  run_redis "redis appendfsync always" "$aof_port" "$conns"
  run_pg "$conns"
done

value() {  # system workload conns [column: 4 ops/s (default), 6 p99, 7 cpu]
  awk -F'\t' -v s="$1" -v w="$2" -v c="$3" -v col="${4:-4}" \
    '$1 == s && $2 == w && $3 == c {print $col}' "$results"
}
# The targets are those of the default store, rocksdb://, as a user runs it; of the
# best of the others when --stores leaves it out.
if [[ -n ${idem_port[rocksdb]:-} ]]; then
  target_idem="idem rocksdb"
else
  target_idem=$(awk -F'\t' '$1 ~ /^idem / && $2 == "new keys" && $3 == 64 {print $4 "\t" $1}' \
    "$results" | sort -rn | head -1 | cut -f2)
fi

# Claim latency at half of that store's peak: new-key claims in an open loop
# (pair_load --rate, latency from each request's due time) at 64 connections.
half_workload="new keys @ half peak"
half=$(awk -v p="$(value "$target_idem" "new keys" 64)" 'BEGIN {printf "%d", p / 2}')
# Where that latency goes, from the server's own histograms over the same run: a
# durable write's time (WAL write, fsync, memtable), its wait for the writer
# thread, and a claim's time from its header to its answer.
metrics_of() {  # port
  curl -s -H "Authorization: Bearer bench" "http://127.0.0.1:$1/metrics"
}
# stage_quantiles BEFORE AFTER PREFIX: "p50 p99" in ms of the histogram whose
# bucket lines start with PREFIX, between two scrapes, each the upper bound of its
# bucket; nothing when the run added no observation.
stage_quantiles() {
  awk -v prefix="$3" '
    function le_of(line) { sub(/.*le="/, "", line); sub(/".*/, "", line); return line }
    index($0, prefix) == 1 {
      le = le_of($1)
      if (FILENAME == ARGV[1]) { if (!(le in before)) before[le] = $2; next }
      if (le in after) next
      after[le] = $2; order[++n] = le
    }
    END {
      total = after[order[n]] - before[order[n]]
      if (total <= 0) exit
      for (i = 1; i <= n; ++i) {
        c = after[order[i]] - before[order[i]]
        ms = order[i] == "+Inf" ? "inf" : sprintf("%.3f", order[i] * 1000)
        if (p50 == "" && c >= 0.5 * total) p50 = ms
        if (p99 == "" && c >= 0.99 * total) p99 = ms
      }
      print p50, p99
    }' "$1" "$2"
}
if [[ -n $target_idem && $half -gt 0 ]]; then
  echo "bench/claims.sh: $target_idem, new keys at $half/s (half of its peak)" >&2
  half_port=${idem_port[${target_idem#idem }]}
  metrics_of "$half_port" >"$work/half-before.metrics"
  cpu_start "$(server_of "$target_idem")"
  record_result "$target_idem" "$half_workload" 64 "$("${on_load[@]}" build/bench/pair_load \
    --port "$half_port" --token bench --connections 64 \
    --seconds "$seconds" --claims-only --rate "$half" --threads "$threads" || true)"
  metrics_of "$half_port" >"$work/half-after.metrics"
  for stage in "claim, header to answer:idem_http_request_duration_seconds_bucket{route=\"/v1/claims\"," \
               "durable write:idem_store_write_seconds_bucket{" \
               "wait for the writer:idem_store_write_queue_seconds_bucket{"; do
    read -r p50 p99 <<<"$(stage_quantiles "$work/half-before.metrics" \
      "$work/half-after.metrics" "${stage#*:}")"
    [[ -n ${p99:-} ]] || continue
    record "$target_idem" "@ half peak: ${stage%%:*} (server, bucket bound)" 64 - "${p50/inf/0}" \
      "${p99/inf/0}" 0
  done
fi
# The batch cells last: their millions of keys leave the store flushing and
# compacting for a while, which would be charged to the cells after them.
if [[ $batch == 1 ]]; then
  for conns in 16 64; do
    for name in "${!idem_port[@]}"; do
      echo "bench/claims.sh: idem serve $name, batches, $conns connections" >&2
      run_wrk "idem $name" "$batch_workload" "$conns" \
        "${idem_port[$name]}" bench/claims/batch.lua "$batch_size"
    done
  done
fi
# The floor under that p99: a bare 4 KiB append + fdatasync on the store's disk, on
# the server's CPU, with nothing else of this script running.
echo "bench/claims.sh: fdatasync of 4 KiB appends in $work" >&2
fsync_line=$("${on_server[@]}" bench/fsync_probe.py "$work" --count $((seconds * 300)) --size 4096)
fsync_p50=$(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' <<<"$fsync_line")
fsync_p99=$(sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p' <<<"$fsync_line")
fsync_cpu=$(sed -n 's/.*cpu_us=\([0-9.]*\).*/\1/p' <<<"$fsync_line")
# Its cpu column is the prober's own CPU per append + fdatasync: what one durable
# write costs its caller on this disk, spread over the records a write holds.
printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "fdatasync 4 KiB append" "bare, alone" 1 - "$fsync_p50" \
  "$fsync_p99" "$fsync_cpu" >>"$results"

printf '\n%-26s %-22s %6s %12s %9s %9s %11s\n' system workload conns "ops/s" "p50 ms" "p99 ms" \
  "cpu us/op"
while IFS=$'\t' read -r system workload conns rps p50 p99 cpu; do
  [[ $rps == - ]] || rps=$(printf '%.0f' "$rps")
  printf '%-26s %-22s %6s %12s %9.3f %9.3f %11s\n' "$system" "$workload" "$conns" "$rps" "$p50" \
    "$p99" "${cpu:--}"
done <"$results"
if [[ $batch == 0 ]]; then
  printf '%-26s %-22s %6s %s\n' "idem ${first_store}" "$batch_workload" "-" \
    "not available (POST /v1/claims/batch answered $batch_status)"
fi

# ratio NAME A B OP TARGET: "ratio NAME = A/B (target OP TARGET)", met or missed;
# "not measured" when A or B is missing or B is 0.
ratio() {
  awk -v name="$1" -v a="$2" -v b="$3" -v op="$4" -v t="$5" 'BEGIN {
    if (a == "" || b == "" || b + 0 == 0) { printf "ratio %s: not measured\n", name; exit }
    r = a / b
    met = (op == ">=") ? r >= t : r <= t
    printf "ratio %s = %.2f (target %s %s) %s\n", name, r, op == ">=" ? "≥" : "≤", t,
           met ? "met" : "missed"
  }'
}
claim_p99=$(value "$target_idem" "$half_workload" 64 6)
echo
echo "targets ($target_idem, 64 connections):"
ratio durable_claims/redis_setnx "$(value "$target_idem" "new keys" 64)" \
  "$(value "redis no persistence" "SET NX" 64)" ">=" 1.0
ratio claim_cpu/redis_aof_setnx_cpu "$(value "$target_idem" "new keys" 64 7)" \
  "$(value "redis appendfsync always" "SET NX" 64 7)" "<=" 1.0
ratio duplicates/nginx "$(value "$target_idem" "duplicates" 64)" "$(value nginx "fixed body" 64)" \
  ">=" 1.0
if [[ $batch == 1 ]]; then
  ratio batch_keys/redis_setnx "$(value "$target_idem" "$batch_workload" 64)" \
    "$(value "redis no persistence" "SET NX" 64)" ">=" 10
else
  echo "ratio batch_keys/redis_setnx: not available (POST /v1/claims/batch answered $batch_status)"
fi
# Met when either holds: p99 ≤ 2 ms, or ≤ twice the bare fdatasync's p99.
ratio claim_p99_half_peak/2ms "$claim_p99" 2 "<=" 1.0
ratio claim_p99_half_peak/fdatasync_p99 "$claim_p99" "$fsync_p99" "<=" 2.0
echo "for reference:"
ratio durable_claims/postgres_insert "$(value "$target_idem" "new keys" 64)" \
  "$(value "postgres durable" "INSERT ON CONFLICT" 64)" ">=" 3.0
ratio duplicates/http_ceiling "$(value "$target_idem" "duplicates" 64)" \
  "$(value "http ceiling" "fixed body" 64)" ">=" 1.0
# What the best of each part would allow a durable HTTP claim on one core: nginx's
# CPU for an HTTP answer plus one fdatasync's CPU shared by the 64 claims a write
# can hold at most, against Redis's CPU per SET NX without persistence (claims/s
# are the inverse of CPU per claim when the server's core is the limit).
awk -v nginx="$(value nginx "fixed body" 64 7)" -v fsync="$fsync_cpu" \
    -v redis="$(value "redis no persistence" "SET NX" 64 7)" 'BEGIN {
  if (nginx == "" || fsync == "" || redis == "" || nginx + 0 == 0) exit
  floor = nginx + fsync / 64
  printf "floor: nginx %.1f + fdatasync %.1f / 64 = %.1f us of CPU a durable claim; " \
         "at most %.2fx Redis without persistence (%.1f us/op)\n", nginx, fsync, floor,
         redis / floor, redis
}'
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

# Throughput by system and connections, as clustered bars (the fdatasync row has none).
awk -F'\t' '$1 !~ /^fdatasync/ {printf "\"%s, %s\"\t%s\t%s\n", $1, $2, $3, $4}' "$results" \
  >"$work/plot.tsv"
gnuplot <<GNUPLOT
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
GNUPLOT
echo "plot: $work/claims.png; table: $results" >&2
