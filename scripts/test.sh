#!/usr/bin/env bash
# The whole test suite, one command: installs what is missing, builds everything,
# starts the services the tests need and runs every test with CTest.
# Extra arguments go to ctest (e.g. -L unit, -R Guard).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 600 "$@"
