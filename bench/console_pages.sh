#!/usr/bin/env bash
# bench/console_pages.sh: how long the operator console's pages take on a large
# store. bench/rss_fill puts --records finished records (tenant and biz_type
# "bench", keys fill-0 …) into a fresh rocksdb:// store; `idem serve --console`
# starts on it; a few claims are left PROCESSING (one with a lapsed 100 ms lease);
# then each page is fetched --tries times with curl (signed in) and the slowest is
# kept. Prints a table (page, status, slowest ms) and last
#   ratio slowest_page/200ms = X.XX (target ≤ 1.0)
#
#   bench/console_pages.sh [--records N] [--tries N]     (default 1000000, 3)
#
# Builds idem and rss_fill into build/ (unless IDEM_BIN names an idem to run), works
# in build/bench-console/ (removed first). The fill writes with sync=off (a durable
# fill of a million records would take minutes; the records are the same).
set -euo pipefail
cd "$(dirname "$0")/.."
records=1000000
tries=3
while [[ $# -gt 0 ]]; do
  case $1 in
    --records) records=$2; shift 2 ;;
    --tries) tries=$2; shift 2 ;;
    *) echo "bench/console_pages.sh: unknown option $1 (--records N, --tries N)" >&2; exit 2 ;;
  esac
done
for v in "$records" "$tries"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench/console_pages.sh: options take positive integers, got '$v'" >&2; exit 2; }
done
source bench/lib.sh
idem=${IDEM_BIN:-build/src/cli/idem}
targets=(rss_fill)
[[ -n ${IDEM_BIN:-} ]] || targets+=(idem)
IDEM_CMAKE_ARGS="-DIDEM_BUILD_BENCH=ON ${IDEM_CMAKE_ARGS:-}" scripts/build.sh "${targets[@]}"

serve_setup bench-console
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

build/bench/rss_fill --store "rocksdb://$work/db?sync=off" --from 0 --to "$records" --threads 2 >&2

admin_line=$("$idem" token new --console-admin ops 2>/dev/null)
admin_token=$(head -n 1 <<<"$admin_line")
tail -n 1 <<<"$admin_line" >"$work/admins"
chmod 600 "$work/admins"
"$idem" serve --store "rocksdb://$work/db" --listen "127.0.0.1:$port" --console \
  --console-admins-file "$work/admins" >"$work/serve.out" 2>"$work/serve.err" &
server_pid=$!
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break
  sleep 0.1
done
base="http://127.0.0.1:$port"
for k in open-1 open-2; do
  curl -s -o /dev/null -X POST -H "Authorization: Bearer bench" \
    -d "{\"biz_type\":\"bench\",\"key\":\"$k\"}" "$base/v1/claims"
done
curl -s -o /dev/null -X POST -H "Authorization: Bearer bench" \
  -d '{"biz_type":"bench","key":"lapsed-1","lease_ms":100}' "$base/v1/claims"
sleep 0.2

jar="$work/cookies"
curl -s -c "$jar" -o /dev/null "$base/console/login"
csrf=$(awk '$6 == "idem_console_login" { print $7 }' "$jar")
curl -s -b "$jar" -c "$jar" -o /dev/null -X POST "$base/console/login" \
  --data "csrf=$csrf&name=ops&token=$admin_token"
grep -q idem_console "$jar" || { echo "bench/console_pages.sh: sign-in failed" >&2; exit 1; }

middle=fill-$(( records / 2 ))
pages=(
  "records?key=$middle"
  "records?tenant=bench&key=fill-12&match=prefix"
  "records?tenant=bench&state=SUCCEEDED"
  "records?tenant=bench&state=PROCESSING"
  "records?tenant=bench&state=FAILED"
  "records?tenant=bench&older_than=24h"
  "record?tenant=bench&key=$middle"
  "stuck"
  "recon"
  "health"
)
printf '%-48s %6s %10s\n' page status slowest_ms
slowest=0
for p in "${pages[@]}"; do
  worst=0 code=0
  for _ in $(seq "$tries"); do
    read -r code secs < <(curl -s -b "$jar" -o /dev/null -w '%{http_code} %{time_total}\n' "$base/console/$p")
    worst=$(awk -v a="$worst" -v b="$secs" 'BEGIN { print (b * 1000 > a) ? b * 1000 : a }')
  done
  printf '%-48s %6s %10.1f\n' "/console/$p" "$code" "$worst"
  [[ $code == 200 ]] || { echo "bench/console_pages.sh: /console/$p answered $code" >&2; exit 1; }
  slowest=$(awk -v a="$slowest" -v b="$worst" 'BEGIN { print (b > a) ? b : a }')
done
echo "records $records, slowest of $tries tries per page"
awk -v s="$slowest" 'BEGIN { r = s / 200; printf "ratio slowest_page/200ms = %.2f (target ≤ 1.0) %s\n", r, (r <= 1.0) ? "met" : "missed" }'
