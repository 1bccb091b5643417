#!/usr/bin/env bash
# Quick start, one command: installs what is missing, builds, and runs
# `idem serve` on the embedded store (rocksdb://./idem-db) at 127.0.0.1:7070, which
# are `idem serve`'s own defaults. Extra arguments go to `idem serve` unchanged and
# win (e.g. --listen 127.0.0.1:8080, --store postgres://…, --config FILE).
# It installs only the build packages: the build needs no test or bench package.
# Environment: as scripts/build.sh (BUILD_DIR, CMAKE_BUILD_TYPE, IDEM_CMAKE_ARGS).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --build >&2
scripts/build.sh idem >&2  # keep stdout for the server: its first line is "listening on …"
exec "${BUILD_DIR:-build}/src/cli/idem" serve "$@"
