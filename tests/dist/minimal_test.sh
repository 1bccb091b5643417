#!/usr/bin/env bash
# A build with only the embedded stores (-DIDEM_WITH_POSTGRES=OFF, IDEM_WITH_MYSQL,
# IDEM_WITH_REDIS, IDEM_WITH_KAFKA, no examples; dist.first_run's flags, since only its
# options are under test): it builds without the drivers or librdkafka linked, serves
# sqlite://, and answers a clear error naming the missing backend for the others.
# Then a test build without mysql:// and rocksdb:// is configured (not built): the
# tests of the backends built are registered, those of the others not.
#   minimal_test.sh SOURCE_DIR DIST_BUILD_DIR
# It reconfigures dist.first_run's tree (the dist_build fixture, a build of every
# backend) with those options and builds `idem` there: the backend options
# change the compile lines of a few objects (the store opener, the cache tier, and
# the `idem` program, whose `idem bridge` is then the not-compiled-in answer), so
# ninja recompiles those and relinks, where a tree of its own compiled all of idem
# again (~240 s of CPU, 86 s of CI's wall time). The output is what a clean build
# with these options makes: ninja rebuilds whatever command line the options touch.
# The tree's own settings are put back at exit, and its objects rebuilt with them.
set -euo pipefail
src=$1
build=$2
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"

[[ -f "$build/CMakeCache.txt" ]] || fail "no dist build in $build (dist.first_run makes it)"
# What this test changes, as the cache has it now: restored by `restore` at exit.
changed=(IDEM_WITH_POSTGRES IDEM_WITH_MYSQL IDEM_WITH_REDIS IDEM_WITH_KAFKA IDEM_BUILD_EXAMPLES IDEM_BUILD_TESTS
  IDEM_BUILD_BENCH CMAKE_DISABLE_FIND_PACKAGE_GTest CMAKE_DISABLE_FIND_PACKAGE_benchmark)
restore_args=()
for var in "${changed[@]}"; do
  if line=$(grep -m1 "^$var:" "$build/CMakeCache.txt"); then
    restore_args+=("-D${line}")
  else
    restore_args+=("-U$var")
  fi
done
# Settings back, and those objects rebuilt with them: the install and package tests
# install what the tree holds (ctest runs these tests in any order).
restore() {
  local rc=$?
  { cmake -S "$src" -B "$build" "${restore_args[@]}" && ninja -C "$build"; } >"$work/restore.log" 2>&1 ||
    { tail -30 "$work/restore.log" >&2; echo "FAIL: restoring $build" >&2; rc=1; }
  cleanup
  exit $rc
}
trap restore EXIT

# Google Benchmark is findable here (dist.first_run hides it): a build with a backend
# off must say itself why it builds no benches, which compare every backend. (The
# tests stay off: with them the library's failpoints are compiled in, and all of idem
# would compile again; the configure below checks a test build.)
cmake -S "$src" -B "$build" \
  -DIDEM_WITH_POSTGRES=OFF -DIDEM_WITH_MYSQL=OFF -DIDEM_WITH_REDIS=OFF -DIDEM_WITH_KAFKA=OFF \
  -DIDEM_BUILD_EXAMPLES=OFF -DIDEM_BUILD_TESTS=OFF -DIDEM_BUILD_BENCH=AUTO \
  -DCMAKE_DISABLE_FIND_PACKAGE_GTest=OFF -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=OFF \
  >"$work/configure.log" || { cat "$work/configure.log" >&2; fail "configure"; }
grep -q 'IDEM_BUILD_BENCH=AUTO: not built, since a backend is off' "$work/configure.log" ||
  fail "configure did not say why the benches are not built"
ninja -C "$build" idem >"$work/build.log" || { tail -30 "$work/build.log" >&2; fail "build"; }
# src/demo's programs of the full build are still beside the tree's idem
# (src/cli/idem-demo, idem-worker): this build has none, so its idem runs from a
# directory of its own, where `idem demo` finds nothing, as in a clean build.
targets=$(ninja -C "$build" -t targets all)
! grep -q '^src/cli/idem-demo:' <<<"$targets" || fail "idem-demo is still a target"
mkdir -p "$work/bin"
cp "$build/src/cli/idem" "$work/bin/idem"
idem=$work/bin/idem
libs=$(ldd "$idem")
for lib in libpq libmariadb libhiredis librdkafka; do
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
# (The password from the environment: one on the command line adds a warning line.)
IDEM_STORE_PASSWORD=s3cret \
  expect 1 "the postgres:// store is not compiled into this build of idem (rebuild with -DIDEM_WITH_POSTGRES=ON)" -- \
  migrate --store postgres://idem@127.0.0.1:1/db
expect 1 "the mysql:// store is not compiled into this build of idem (rebuild with -DIDEM_WITH_MYSQL=ON)" -- \
  serve --listen 127.0.0.1:0 --store mysql://idem:s3cret@127.0.0.1:1/db
# A flag this build cannot honour is bad usage (2), like an unknown --cache URL.
expect 2 "the Redis tier is not compiled into this build (IDEM_WITH_REDIS=OFF)" -- \
  serve --listen 127.0.0.1:0 --store "sqlite://$work/a.db" --cache redis://:s3cret@127.0.0.1:1
expect 1 "'demo' is the refund example's demo (the program idem-demo; build it with \`scripts/build.sh idem-demo\`)" -- demo refund
expect 1 "bridge kafka: Kafka is not compiled into this build of idem (rebuild with librdkafka-dev and -DIDEM_WITH_KAFKA=ON)" -- \
  bridge kafka --brokers 127.0.0.1:1 --topic t --group g --to http://127.0.0.1:1/
# The embedded store works.
"$idem" migrate --store "sqlite://$work/m.db" | grep -qx 'action: created' || fail "migrate sqlite"

# A test build without some backends configures (a tree of its own, not built): the
# test binaries that use a missing backend by name are not registered, the others
# are, and the suites over every backend leave it out (store_factory.h).
cmake -S "$src" -B "$work/tests" -G Ninja -DIDEM_WITH_MYSQL=OFF -DIDEM_WITH_ROCKSDB=OFF \
  -DIDEM_BUILD_TESTS=ON -DIDEM_BUILD_BENCH=OFF >"$work/tests-configure.log" 2>&1 ||
  { tail -30 "$work/tests-configure.log" >&2; fail "configure of tests without mysql and rocksdb"; }
registered=$(ctest --test-dir "$work/tests" -N)
for t in steps_conformance_test postgres_store_test recon_cli_test; do
  grep -q " ${t}_NOT_BUILT\$" <<<"$registered" || fail "$t is not registered without mysql and rocksdb"
done
for t in mysql_store_test rocksdb_store_test recon_sql_test cli_test; do
  ! grep -q " ${t}_NOT_BUILT\$" <<<"$registered" || fail "$t is registered without its backend"
done
echo "minimal build: sqlite only, no driver linked, clear errors for the rest; tests configure without mysql and rocksdb"
