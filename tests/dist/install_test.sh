#!/usr/bin/env bash
# `cmake --install` of the dist build (dist.first_run) into a temporary prefix, then
# examples/consumer built against it twice, as a C++ team would: with
# find_package(idem) and with pkg-config. Also checks what is installed (public
# headers only, no driver header in them) and that `idem` does not link the example.
#   install_test.sh SOURCE_DIR DIST_BUILD_DIR
set -euo pipefail
src=$1
build=$2
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >"$work/install.log"
libdir=$(find "$prefix" -name idem.pc -printf '%h\n' | sed 's|/pkgconfig$||')
[[ -n "$libdir" ]] || fail "no idem.pc installed"
for f in bin/idem include/idem/idem.h include/idem/guard.h include/idem/store.h; do
  [[ -e "$prefix/$f" ]] || fail "$f not installed"
done
for f in cmake/idem/idemConfig.cmake cmake/idem/idemConfigVersion.cmake cmake/idem/idemTargets.cmake \
         libidem.a libidem_core.a libidem_sqlite.a libidem_postgres.a libidem_mysql.a libidem_redis.a; do
  [[ -e "$libdir/$f" ]] || fail "${libdir#"$prefix"/}/$f not installed"
done
[[ -x "$prefix/libexec/idem/idem-demo" ]] || fail "libexec/idem/idem-demo not installed"
# Only the public API: nothing from src/, and no driver type in a public header.
[[ -z "$(find "$prefix/include" -type f ! -path "$prefix/include/idem/*.h")" ]] ||
  fail "headers outside include/idem: $(find "$prefix/include" -type f ! -path "$prefix/include/idem/*")"
! grep -lE '#include [<"](libpq-fe|mysql|hiredis|sqlite3|rdkafka)' "$prefix"/include/idem/*.h ||
  fail "a public header includes a driver header"
# Failpoints are the tests' alone (docs/reliability.md): no failpoint header or
# ArmFailpoint in what is installed, and the seeded bug guard.finish.skip_token_check
# cannot be turned on from the prefix, by the variable or by ArmFailpoint.
! grep -rlE 'ArmFailpoint|failpoint\.h|IDEM_FAILPOINT' "$prefix/include" ||
  fail "an installed header names failpoints"
! nm -C --defined-only "$libdir"/*.a 2>/dev/null | grep -E ' idem::(ArmFailpoint|DisarmAllFailpoints)\(' ||
  fail "an installed library defines ArmFailpoint"
mkdir -p "$work/probe"
cat >"$work/probe/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(fencing_probe LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(idem REQUIRED)
add_executable(fencing_probe $src/tests/dist/fencing_probe.cc)
target_link_libraries(fencing_probe PRIVATE idem::idem)
CMAKE
{ cmake -S "$work/probe" -B "$work/probe-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" &&
  cmake --build "$work/probe-build"; } >"$work/probe.log" 2>&1 ||
  { cat "$work/probe.log" >&2; fail "fencing probe build"; }
out=$(IDEM_FAILPOINTS=guard.finish.skip_token_check=on "$work/probe-build/fencing_probe" \
  "sqlite://$work/probe.db") || fail "the installed library can arm the seeded bug: $out"
[[ "$out" == $'ArmFailpoint: absent\nstale complete: ABORTED' ]] || fail "fencing probe printed: $out"
! grep -q "$src/src" "$libdir/cmake/idem/idemTargets.cmake" || fail "exported targets name the source tree"
# Each backend is its own exported target.
for t in idem core sqlite postgres mysql redis cache memory; do
  grep -q "add_library(idem::$t " "$libdir/cmake/idem/idemTargets.cmake" || fail "no exported target idem::$t"
done
# The product binary does not link the refund example (it runs idem-demo instead).
! nm -C "$prefix/bin/idem" | grep -q 'idem::refund::' || fail "bin/idem links the refund example"
"$prefix/bin/idem" --version | grep -q '^idem ' || fail "idem --version"
# The installed idem finds its external subcommand in libexec/idem.
"$prefix/bin/idem" demo --help | grep -q 'refund' || fail "installed 'idem demo --help' does not run idem-demo"

# 1. find_package(idem)
cmake -S "$src/examples/consumer" -B "$work/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work/configure.log" || { cat "$work/configure.log" >&2; fail "consumer configure"; }
cmake --build "$work/cmake-build" >"$work/build.log" || { cat "$work/build.log" >&2; fail "consumer build"; }
out=$("$work/cmake-build/consumer" "sqlite://$work/cmake.db")
[[ "$out" == $'executed\nreplayed {"refund_id":"F-1"}' ]] || fail "find_package consumer printed: $out"
# A component that this build has, and one that does not exist.
cat >"$work/components.cmake" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(c LANGUAGES CXX)
find_package(idem REQUIRED COMPONENTS postgres mysql redis)
find_package(idem QUIET COMPONENTS kafka-that-is-not-built)
if(idem_FOUND)
  message(FATAL_ERROR "a component that is not built was found")
endif()
CMAKE
mkdir -p "$work/components" && cp "$work/components.cmake" "$work/components/CMakeLists.txt"
cmake -S "$work/components" -B "$work/components-build" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work/components.log" 2>&1 || { cat "$work/components.log" >&2; fail "find_package COMPONENTS"; }

# 2. pkg-config
# The Makefile beside the example, in a copy (make writes next to its sources).
mkdir -p "$work/pc" && cp "$src/examples/consumer/main.cc" "$src/examples/consumer/Makefile" "$work/pc/"
PKG_CONFIG_PATH="$libdir/pkgconfig" make -s -C "$work/pc" consumer-pc >"$work/pc.log" 2>&1 ||
  { cat "$work/pc.log" >&2; fail "pkg-config build (examples/consumer/Makefile)"; }
out=$("$work/pc/consumer-pc" "sqlite://$work/pc.db")
[[ "$out" == $'executed\nreplayed {"refund_id":"F-1"}' ]] || fail "pkg-config consumer printed: $out"
echo "install: $(find "$prefix" -type f | wc -l) files; consumer built with find_package and pkg-config"
