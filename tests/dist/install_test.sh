#!/usr/bin/env bash
# `cmake --install` of the dist build (dist.first_run) into a temporary prefix, then
# examples/consumer (the guarded effect, and the Kafka consumer of idem::messaging)
# built against it twice, as a C++ team would: with find_package(idem) and with
# pkg-config; and examples/refund's sources compiled against it. Also checks what is
# installed (public headers only, no driver header in them) and that `idem` does not
# link the example.
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
for f in bin/idem include/idem/idem.h include/idem/guard.h include/idem/store.h \
         include/idem/messaging/runner.h include/idem/messaging/transport.h \
         include/idem/messaging/message_key.h include/idem/messaging/kafka_transport.h \
         include/idem/messaging/redis_streams.h include/idem/messaging/transactional.h; do
  [[ -e "$prefix/$f" ]] || fail "$f not installed"
done
for f in cmake/idem/idemConfig.cmake cmake/idem/idemConfigVersion.cmake cmake/idem/idemTargets.cmake \
         libidem.a libidem_core.a libidem_sqlite.a libidem_postgres.a libidem_mysql.a libidem_redis.a \
         libidem_messaging.a pkgconfig/idem-messaging.pc; do
  [[ -e "$libdir/$f" ]] || fail "${libdir#"$prefix"/}/$f not installed"
done
[[ -x "$prefix/libexec/idem/idem-demo" ]] || fail "libexec/idem/idem-demo not installed"
# Only the public API: nothing from src/, and no driver type in a public header.
[[ -z "$(find "$prefix/include" -type f ! -path "$prefix/include/idem/*.h")" ]] ||
  fail "headers outside include/idem: $(find "$prefix/include" -type f ! -path "$prefix/include/idem/*")"
! grep -rlE '#include [<"](libpq-fe|mysql|hiredis|sqlite3|rdkafka|librdkafka/)' "$prefix"/include/idem ||
  fail "a public header includes a driver header"
# The messaging headers include only public headers (no src/ path such as kafka/ or core/).
! grep -rhE '^#include "' "$prefix/include/idem/messaging" | grep -vE '^#include "(idem|absl)/' ||
  fail "a messaging header includes a header that is not installed"
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
for t in idem core sqlite postgres mysql redis cache memory messaging; do
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
# The Kafka consumer: R-1..R-4 produced, R-2 twice, consumed by a group and replayed by a
# second one; each order applied exactly once (one ledger row each). The library's
# rebalance log lines are left out.
kafka_expected=$'group refunds: 5 messages, 4 applied, 1 duplicates
group refunds-replay: 5 messages, 0 applied, 5 duplicates
applied R-1
applied R-2
applied R-3
applied R-4'
# check_kafka_consumer PROGRAM DB WHAT
check_kafka_consumer() {
  local rc=0
  "$1" "sqlite://$2" >"$work/kafka.out" 2>"$work/kafka.err" || rc=$?
  out=$(grep -E '^(group|applied) ' "$work/kafka.out" || true)
  [[ $rc == 0 && "$out" == "$kafka_expected" ]] ||
    fail "$3 kafka_consumer exited $rc and printed: $out $(tail -5 "$work/kafka.err")"
}
[[ -x "$work/cmake-build/kafka_consumer" ]] || fail "find_package: kafka_consumer not built (idem::messaging)"
check_kafka_consumer "$work/cmake-build/kafka_consumer" "$work/kafka-cmake.db" find_package
# A component that this build has, and one that does not exist.
cat >"$work/components.cmake" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(c LANGUAGES CXX)
find_package(idem REQUIRED COMPONENTS postgres mysql redis messaging)
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
mkdir -p "$work/pc" && cp "$src/examples/consumer"/{main.cc,kafka_consumer.cc,Makefile} "$work/pc/"
PKG_CONFIG_PATH="$libdir/pkgconfig" make -s -C "$work/pc" consumer-pc kafka-consumer-pc >"$work/pc.log" 2>&1 ||
  { cat "$work/pc.log" >&2; fail "pkg-config build (examples/consumer/Makefile)"; }
out=$("$work/pc/consumer-pc" "sqlite://$work/pc.db")
[[ "$out" == $'executed\nreplayed {"refund_id":"F-1"}' ]] || fail "pkg-config consumer printed: $out"
check_kafka_consumer "$work/pc/kafka-consumer-pc" "$work/kafka-pc.db" pkg-config
# 3. examples/refund copied out of the repository: its library sources (the channel,
# the refund operation, its Kafka consumer; not the programs' mains) compile against
# the prefix and the third-party packages alone. An include of a header that is not
# installed (src/'s core/failpoint.h, cli/…) fails here (and in examples_include_test).
mkdir -p "$work/refund-copy/refund"
cp "$src/examples/refund"/*.h "$src/examples/refund"/*.cc "$work/refund-copy/refund/"
cat >"$work/refund-copy/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(refund_copy LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(idem REQUIRED COMPONENTS messaging)
find_package(Boost REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(spdlog REQUIRED)
file(GLOB sources refund/*.cc)
list(FILTER sources EXCLUDE REGEX "(_main|_test)\\.cc$")
add_library(refund OBJECT ${sources})
target_include_directories(refund PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(refund PRIVATE idem::messaging idem::idem Boost::headers
  nlohmann_json::nlohmann_json spdlog::spdlog)
CMAKE
{ cmake -S "$work/refund-copy" -B "$work/refund-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" &&
  cmake --build "$work/refund-build"; } >"$work/refund.log" 2>&1 ||
  { tail -30 "$work/refund.log" >&2; fail "examples/refund's sources against the install prefix"; }
echo "install: $(find "$prefix" -type f | wc -l) files; consumer and kafka_consumer built with find_package and pkg-config; examples/refund compiles against the prefix"
