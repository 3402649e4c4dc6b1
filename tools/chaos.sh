#!/usr/bin/env bash
# Load and fault run of performer-serve on loopback (tests/chaos/chaos.py):
# 4x capacity for 60 s, 1,000 cancels and vanished clients, a 120 s soak
# with RSS and fd slopes, SIGTERM under load, SIGKILL and restart. Builds
# what it needs first; extra arguments go to chaos.py (e.g.
# --overload_seconds=10 --cancels=200 --soak_seconds=20 for a short run).
# Prints a Markdown table of the figures; exits non-zero if a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target performer-serve performer_integration_python_stubs
PERFORMER_SERVE="$PWD/$BUILD_DIR/server/performer-serve" \
  PYTHONPATH="$PWD/$BUILD_DIR/python:$PWD/tests/integration/python" PYTHONDONTWRITEBYTECODE=1 \
  python3 tests/chaos/chaos.py "$@"
