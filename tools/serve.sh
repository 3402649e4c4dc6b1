#!/usr/bin/env bash
# Builds performer-serve and starts it on the repository's default model
# (models/, see models/README.md), listening on port 50051 (README: "build
# and run"). Extra arguments are passed to the server (see --help).
# Installs the Debian packages it needs when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$(nproc)" --target performer-serve performer-client
exec "$BUILD_DIR/server/performer-serve" "$@"
