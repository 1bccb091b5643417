#!/usr/bin/env bash
# Installs, with apt-get, the Debian 12 packages idem needs to build and test that
# are not installed yet. Idempotent and quiet when nothing is missing.
#   scripts/deps.sh          build + test dependencies (compiler, libraries, servers)
#   scripts/deps.sh --build  only what building and running `idem` needs
#   scripts/deps.sh --package  that, and what building the Debian package needs
#   scripts/deps.sh --bench    the build's, and what bench/claims.sh and profile_claims.sh run
set -euo pipefail

build_pkgs=(
  g++ cmake ninja-build pkg-config curl
  libabsl-dev libsqlite3-dev libssl-dev libboost-dev libpq-dev libmariadb-dev libhiredis-dev
  libsimdjson-dev nlohmann-json3-dev libspdlog-dev libcli11-dev libtomlplusplus-dev
  librocksdb-dev librdkafka-dev
  libhttp-parser-dev  # the lean HTTP engine's request parser (idem serve --http lean)
)
package_pkgs=(help2man dpkg-dev file)
# bench/claims.sh's peers and load generators (pgbench comes with postgresql-15),
# its plot, and profile_claims.sh's callgrind.
bench_pkgs=(
  libbenchmark-dev postgresql-15 redis-server redis-tools nginx-light wrk gnuplot-nox python3
  valgrind util-linux  # util-linux: taskset, setpriv
)
test_pkgs=(
  libgtest-dev libgmock-dev libbenchmark-dev
  postgresql-15 mariadb-server redis-server
  galera-4 rsync iproute2
  python3 python3-pytest python3-jsonschema python3-yaml
  # clients/go: the Go toolchain and the drivers its tests use (built offline)
  golang-go golang-github-lib-pq-dev golang-github-go-sql-driver-mysql-dev
  # clients/java: the JDK, JUnit 5's console launcher and the JDBC drivers its tests use
  openjdk-17-jdk-headless junit5 libpostgresql-jdbc-java libmariadb-java
  nodejs  # clients/node: Node >= 18 (npm is added below when none is on PATH)
  chromium spin
  clang-14 libclang-rt-14-dev  # tests/fuzz: clang, libFuzzer and the sanitizer runtimes
  ccache  # scripts/test.sh: the dist tests' tree reuses the main tree's objects
  lld  # scripts/test.sh and sanitize.sh link with it (IDEM_LINKER, cmake/IdemBuildSpeed.cmake)
  "${package_pkgs[@]}"
)

pkgs=("${build_pkgs[@]}")
case "${1:-}" in
  --build) ;;
  --package) pkgs+=("${package_pkgs[@]}") ;;
  --bench) pkgs+=("${bench_pkgs[@]}") ;;
  "") pkgs+=("${test_pkgs[@]}")
      # NodeSource's nodejs bundles npm and conflicts with Debian's npm package: add
      # npm only when no npm is on PATH.
      command -v npm >/dev/null 2>&1 || pkgs+=(npm) ;;
  *) echo "deps.sh: unknown option '$1' (use --build, --package, --bench or nothing)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
  else
    echo "deps.sh: missing packages: ${missing[*]}; run this script as root" >&2
    exit 1
  fi
else
  SUDO=
fi

echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine has empty package lists; a failed install is retried once after
# refreshing them.
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
