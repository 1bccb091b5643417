#!/usr/bin/env bash
# bench/consume.sh: messages/s of the consumer runner (idem/messaging/runner.h) whose
# effect is one SQL row per message, with per-message commits (one store
# transaction and one offset commit per message) versus batched commits (one of
# each per poll batch, each message still idempotent under its own claim), on
# SQLite (synchronous=full) and a durable PostgreSQL 15 (fsync on), in one run.
# Kafka is librdkafka's mock cluster inside the bench, over loopback.
#
#   bench/consume.sh [--messages N] [--batch B]
#
# Prints the table of bench/consume_bench and, per store and effect (the handler runs
# the INSERT, or it is the runner's first_statement), "ratio batched/per_message".
# Installs what it needs (scripts/deps.sh), builds into build/, works in
# build/bench-consume/ and stops the PostgreSQL it started.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
messages=5000
batch=500
while [[ $# -gt 0 ]]; do
  case $1 in
    --messages) messages=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) echo "bench/consume.sh: unknown option $1 (--messages N, --batch B)" >&2; exit 2 ;;
  esac
done

scripts/deps.sh
IDEM_CMAKE_ARGS="-DIDEM_BUILD_BENCH=ON ${IDEM_CMAKE_ARGS:-}" scripts/build.sh consume_bench

work="$root/build/bench-consume"
rm -rf "$work"
mkdir -p "$work"
services="$work/services"
cleanup() {
  IDEM_SERVICES=postgres "$root/scripts/services.sh" stop "$services" >/dev/null 2>&1 || true
}
trap cleanup EXIT
IDEM_SERVICES=postgres IDEM_SERVICES_DURABLE=1 "$root/scripts/services.sh" start "$services" >/dev/null
# shellcheck disable=SC1091
source "$services/env.sh"

"$root/build/bench/consume_bench" --messages "$messages" --batch "$batch" \
  "sqlite://$work/consume.db" "$IDEM_TEST_POSTGRES_URL"
