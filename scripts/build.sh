#!/usr/bin/env bash
# Configures (once) and builds idem into build/ with CMake + Ninja.
#   scripts/build.sh [ninja targets...]
# Environment: BUILD_DIR (default build), CMAKE_BUILD_TYPE (default RelWithDebInfo),
# IDEM_CMAKE_ARGS (extra cmake arguments, e.g. -DIDEM_SANITIZE=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
if [[ ! -f "$build_dir/build.ninja" ]]; then
  cmake -S . -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" -DIDEM_WERROR=ON \
    ${IDEM_CMAKE_ARGS:-} >/dev/null
fi
# Two cores, ~1.5 GB per heavy translation unit: two jobs keep memory in bounds.
ninja -C "$build_dir" -j "${JOBS:-$(nproc)}" "$@"
