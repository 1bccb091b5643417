#!/usr/bin/env bash
# bench/chaos.sh: long seeded chaos runs, one per backend, each judged
# by the history checker (tests/chaos/checker.h); prints each run's summary (seed,
# operations, keys, faults injected by kind) and the checker's table.
#
#   bench/chaos.sh --minutes M --seed S [--backend rocksdb|postgres|mysql|kafka|streams|all]
#                  [--clients N]
#
# rocksdb: one `idem serve`, killed (SIGKILL + restart) and stalled (SIGSTOP past the
# lease). postgres / mysql: a private PostgreSQL 15 / MariaDB that the run starts
# itself (scripts/services.sh under build/chaos-bench/, durable settings, its own
# port), crashed and restarted, behind a fault proxy that black-holes, resets,
# delays and cuts connections before/after a COMMIT; two `idem serve` share it.
# kafka / streams: consumer processes (three; --clients sets how many) in one group
# on librdkafka's mock cluster / a Redis stream of a private redis-server that the
# run starts (scripts/services.sh under build/chaos-bench/services), killed,
# crashed at failpoints, stalled, joined and removed, with broker and connection
# faults (tests/chaos/messaging.h); each event's effect must happen once.
# Everything a run starts is stopped by pid when it ends. Exit 0 when every run
# passed every property, 1 when one did not (its files stay in build/chaos-bench/),
# 2 for bad usage. Builds `idem` and `chaos_driver` into build/ (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="" seed="" backend=all clients=""
usage() {
  echo "bench/chaos.sh: $1" >&2
  echo "usage: bench/chaos.sh --minutes M --seed S [--backend rocksdb|postgres|mysql|kafka|streams|all] [--clients N]" >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || usage "$1 needs a value"
  case $1 in
    --minutes) minutes=$2 ;;
    --seed) seed=$2 ;;
    --backend) backend=$2 ;;
    --clients) clients=$2 ;;
    *) usage "unknown option $1" ;;
  esac
  shift 2
done
[[ $minutes =~ ^[0-9]+([.][0-9]+)?$ ]] || usage "--minutes must be a number, not '$minutes'"
[[ $seed =~ ^[0-9]+$ ]] || usage "--seed must be a whole number, not '$seed'"
[[ -z $clients || $clients =~ ^[0-9]+$ ]] || usage "--clients must be a whole number, not '$clients'"
case $backend in
  all) backends=(rocksdb postgres mysql kafka streams) ;;
  rocksdb | postgres | mysql | kafka | streams) backends=("$backend") ;;
  *) usage "--backend must be rocksdb, postgres, mysql, kafka, streams or all, not '$backend'" ;;
esac
seconds=$(awk -v m="$minutes" 'BEGIN { s = int(m * 60); print (s < 1 ? 1 : s) }')

JOBS=${JOBS:-2} scripts/build.sh idem chaos_driver
work=$PWD/build/chaos-bench
mkdir -p "$work"
# The Redis Streams run needs a redis-server: a private one unless the caller's
# environment names one (IDEM_TEST_REDIS_URL).
if [[ " ${backends[*]} " == *" streams "* && -z ${IDEM_TEST_REDIS_URL:-} ]]; then
  scripts/services.sh start "$work/services"
  trap 'scripts/services.sh stop "$work/services" || true' EXIT
  # shellcheck source=/dev/null
  source "$work/services/env.sh"
fi
failed=0
for b in "${backends[@]}"; do
  echo "== $b: ${seconds}s, seed $seed"
  # --clients: HTTP clients (default 8) or, for kafka/streams, consumers (default 3).
  if build/tests/chaos/chaos_driver --backend "$b" --seconds "$seconds" --seed "$seed" \
      ${clients:+--clients "$clients"} --dir "$work/$b"; then
    rm -rf "$work/$b"
  else
    failed=1
    echo "bench/chaos.sh: $b failed with seed $seed (files in $work/$b)" >&2
  fi
done
exit $failed
