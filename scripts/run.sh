#!/usr/bin/env bash
# Quick start, one command: installs what is missing, builds, and runs
# `idem serve` on the embedded store (sqlite://./idem.db) at 127.0.0.1:7070.
# Extra arguments go to `idem serve` (e.g. --listen 127.0.0.1:8080).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --build >&2
scripts/build.sh idem >&2  # keep stdout for the server: its first line is "listening on …"
exec build/src/cli/idem serve --store "sqlite://./idem.db" --listen 127.0.0.1:7070 "$@"
