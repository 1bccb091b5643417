#!/usr/bin/env bash
# Builds the Debian package (packaging/): installs what is missing, builds idem with
# the prefix /usr in build-deb/ (BUILD_DIR), and runs CPack. Prints the .deb's path.
#   scripts/package.sh && apt-get install ./build-deb/idem_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --package >&2
export BUILD_DIR=${BUILD_DIR:-build-deb} CMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release}
IDEM_CMAKE_ARGS="-DCMAKE_INSTALL_PREFIX=/usr -DIDEM_BUILD_TESTS=OFF -DIDEM_BUILD_BENCH=OFF ${IDEM_CMAKE_ARGS:-}" \
  scripts/build.sh >&2
cd "$BUILD_DIR"
rm -f idem_*.deb
cpack -G DEB >&2
ls "$PWD"/idem_*.deb
