#!/usr/bin/env bash
# The whole test suite, one command: installs what is missing, builds everything,
# starts the servers the tests need (PostgreSQL, MariaDB, Redis on loopback, data
# under build/services, stopped by pid at the end) and runs every test with CTest.
# Extra arguments go to ctest (e.g. -L unit, -R Guard).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# The test and bench packages are installed now: a build without them is an error here.
IDEM_CMAKE_ARGS="-DIDEM_BUILD_TESTS=ON -DIDEM_BUILD_BENCH=ON ${IDEM_CMAKE_ARGS:-}" scripts/build.sh
root=$PWD
services_dir="$root/build/services"
scripts/services.sh start "$services_dir"
# Stop the servers however the run ends, and keep ctest's exit status.
trap 'rc=$?; "$root/scripts/services.sh" stop "$services_dir" || true; exit $rc' EXIT
# shellcheck source=/dev/null
source "$services_dir/env.sh"
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 600 "$@"
