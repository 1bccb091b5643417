#!/usr/bin/env bash
# A build with only the embedded stores (-DIDEM_WITH_POSTGRES=OFF, IDEM_WITH_MYSQL,
# IDEM_WITH_REDIS, no examples; -O0, since only its options are under test): it
# builds without the drivers linked, serves
# sqlite://, and answers a clear error naming the missing backend for the others.
#   minimal_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"

cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS=-O0 -DIDEM_WERROR=ON \
  -DIDEM_WITH_POSTGRES=OFF -DIDEM_WITH_MYSQL=OFF -DIDEM_WITH_REDIS=OFF \
  -DIDEM_BUILD_EXAMPLES=OFF -DIDEM_BUILD_TESTS=AUTO -DIDEM_BUILD_BENCH=AUTO \
  >"$work/configure.log" || { cat "$work/configure.log" >&2; fail "configure"; }
grep -q 'IDEM_BUILD_TESTS=AUTO: not built, since a backend is off' "$work/configure.log" ||
  fail "configure did not say why the tests are not built"
ninja -C "$build" idem >"$work/build.log" || { tail -30 "$work/build.log" >&2; fail "build"; }
idem=$build/src/cli/idem
libs=$(ldd "$idem")
for lib in libpq libmariadb libhiredis; do
  ! grep -q "$lib" <<<"$libs" || fail "idem links $lib in a build without it"
done

# expect STATUS TEXT -- ARGS: exit status and one stderr line containing TEXT.
expect() {
  local want=$1 text=$2
  shift 3
  local rc=0
  "$idem" "$@" >"$work/out" 2>"$work/err" </dev/null || rc=$?
  [[ $rc == "$want" ]] || fail "idem $* exited $rc, not $want: $(cat "$work/err")"
  grep -qF "$text" "$work/err" || fail "idem $*: stderr lacks '$text': $(cat "$work/err")"
  [[ $(wc -l <"$work/err") == 1 ]] || fail "idem $*: more than one stderr line: $(cat "$work/err")"
  ! grep -q 's3cret' "$work/err" || fail "idem $* printed the password"
}
expect 1 "the postgres:// store is not compiled into this build of idem (rebuild with -DIDEM_WITH_POSTGRES=ON)" -- \
  migrate --store postgres://idem:s3cret@127.0.0.1:1/db
expect 1 "the mysql:// store is not compiled into this build of idem (rebuild with -DIDEM_WITH_MYSQL=ON)" -- \
  serve --listen 127.0.0.1:0 --store mysql://idem:s3cret@127.0.0.1:1/db
# A flag this build cannot honour is bad usage (2), like an unknown --cache URL.
expect 2 "the Redis tier is not compiled into this build (IDEM_WITH_REDIS=OFF)" -- \
  serve --listen 127.0.0.1:0 --store "sqlite://$work/a.db" --cache redis://:s3cret@127.0.0.1:1
expect 1 "'demo' is the refund example's demo" -- demo refund
# The embedded store works.
"$idem" migrate --store "sqlite://$work/m.db" | grep -qx 'action: created' || fail "migrate sqlite"
echo "minimal build: sqlite only, no driver linked, clear errors for the rest"
