#!/usr/bin/env bash
# The Quick start's first command as a new user meets it: scripts/run.sh on a
# machine without the test and bench packages. GTest and Google Benchmark are made
# unfindable, so a `find_package` of a test-only package on the run path fails this
# test (it did on a fresh Debian 12: "Could NOT find GTest").
#   first_run_test.sh SOURCE_DIR BUILD_DIR
# Also checks that the user's own flags win over run.sh's (--listen, --store), and
# leaves BUILD_DIR (prefix /usr, then built in full) for the install and package
# tests.
# The build's flags: with IDEM_DIST_CCACHE_DIR (tests/dist/CMakeLists.txt sets it to
# the main tree's IDEM_CCACHE_DIR, which scripts/test.sh sets), the main tree's build
# type, line-tables setting and unity batches through the same ccache: every compile
# is one the main tree made, so it comes from the cache (~40 s of CPU, not ~280 s at
# -O0), and the binaries are run.sh's optimised ones. ccache reuses an object only for the same
# sources, headers and flags, so a header missing without the test packages still
# fails the build. Without it: -O0 (build type None), since what is checked is
# run.sh's path and what it builds, not the code's speed.
set -euo pipefail
src=$1
build=$2
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"

export BUILD_DIR=$build
export IDEM_CMAKE_ARGS="-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON -DCMAKE_INSTALL_PREFIX=/usr"
if [[ -n ${IDEM_DIST_CCACHE_DIR:-} ]]; then
  export CMAKE_BUILD_TYPE=${IDEM_DIST_BUILD_TYPE:-RelWithDebInfo}
  IDEM_CMAKE_ARGS+=" -DIDEM_CCACHE_DIR=$IDEM_DIST_CCACHE_DIR -DIDEM_LINE_TABLES_ONLY=${IDEM_DIST_LINE_TABLES_ONLY:-OFF}"
  # The same unity batches, or no unit is the same (a tree configured before the
  # default batch changed keeps its own in its cache).
  IDEM_CMAKE_ARGS+=" ${IDEM_DIST_UNITY:-}"
else
  export CMAKE_BUILD_TYPE=None CXXFLAGS=-O0
fi
# A fresh configure, as a new user's first run has: the cache of an earlier run goes
# (dist.minimal_backends reconfigures this tree and puts it back at exit, which a
# killed run would not), and ninja still reuses the objects whose command lines match.
rm -f "$build/CMakeCache.txt"
# run.sh's stdout is the server's; its first line is "listening on HOST:PORT".
"$src/scripts/run.sh" --listen 127.0.0.1:0 --store "sqlite://$work/idem.db" \
  >"$work/stdout" 2>"$work/stderr" &
pid=$!
wait_listening "$work/stdout" "$work/stderr" 12000  # the build comes first: up to 20 min
line=$(head -1 "$work/stdout")
[[ "$line" =~ ^listening\ on\ 127\.0\.0\.1:([0-9]+)$ ]] || fail "first stdout line is '$line'"
port=${BASH_REMATCH[1]}
[[ "$port" != 7070 ]] || fail "run.sh's own --listen won over the user's"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")
[[ "$code" == 200 ]] || fail "/readyz answered $code"
[[ -f "$work/idem.db" ]] || fail "the user's --store was not used"
grep -q 'development tenant "dev", token: ' "$work/stderr" || fail "no development tenant line"

# The build had no test or bench package: it says so and has no test targets.
targets=$(ninja -C "$build" -t targets all)
for t in core_test http_serve_test guard_bench; do
  ! grep -q "^$t:" <<<"$targets" || fail "target $t exists in a build without GTest/benchmark"
done
grep -q '^src/cli/idem:' <<<"$targets" || fail "no idem target"
# The install and package tests (dist_build fixture) need all of it built: run.sh
# built only `idem`; the libraries, the examples' programs and the man pages follow.
ninja -C "$build" >"$work/build-all.log" || { tail -30 "$work/build-all.log" >&2; fail "building all of $build"; }
echo "first run: listening on 127.0.0.1:$port, /readyz 200, no test targets"
