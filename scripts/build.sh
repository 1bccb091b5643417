#!/usr/bin/env bash
# Configures (once) and builds idem into build/ with CMake + Ninja.
#   scripts/build.sh [ninja targets...]
# Environment: BUILD_DIR (default build), CMAKE_BUILD_TYPE (default RelWithDebInfo),
# PRESET (a configure preset of CMakePresets.json, e.g. ci or asan: its settings, in
# BUILD_DIR), IDEM_CMAKE_ARGS (extra cmake arguments, e.g. -DIDEM_SANITIZE=ON; they win
# over the preset's).
# Tests and benchmarks are built when their packages are installed (IDEM_BUILD_TESTS
# and IDEM_BUILD_BENCH default to AUTO); scripts/test.sh makes them required.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
# Configured on every call (a second or two with a warm cache): a build first made
# by scripts/run.sh without the test packages must pick up the tests once
# scripts/test.sh has installed them, and IDEM_CMAKE_ARGS given later must apply.
cmake_args=()
if [[ -n "${PRESET:-}" ]]; then
  cmake_args+=(--preset "$PRESET")
fi
if [[ -z "${PRESET:-}" && ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake_args+=(-G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" -DIDEM_WERROR=ON)
elif [[ -n "${CMAKE_BUILD_TYPE:-}" ]]; then
  cmake_args+=(-DCMAKE_BUILD_TYPE="$CMAKE_BUILD_TYPE")
fi
# shellcheck disable=SC2206  # IDEM_CMAKE_ARGS is a list of words on purpose
cmake_args+=(${IDEM_CMAKE_ARGS:-})
cmake -S . -B "$build_dir" "${cmake_args[@]}" >/dev/null
# Two cores, ~1.5 GB per heavy translation unit: two jobs keep memory in bounds.
ninja -C "$build_dir" -j "${JOBS:-$(nproc)}" "$@"
