#!/usr/bin/env bash
# Builds performer-serve and starts it on the repository's default model
# (models/, see models/README.md), listening on port 50051 (README: "build
# and run"). Once the server is ready it streams one completion of the
# default model with performer-client, so that the first run shows what the
# server does; then it keeps serving until Ctrl-C (a graceful drain).
# Extra arguments are passed to the server (see --help); set
# PERFORMER_DEMO_PROMPT= (empty) to skip the demo completion.
# Installs the Debian packages it needs when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$(nproc)" --target performer-serve performer-client

PORT_FILE="$(mktemp)"
"$BUILD_DIR/server/performer-serve" --port_file="$PORT_FILE" "$@" &
SERVER_PID=$!
# Ctrl-C / SIGTERM go to the server, which drains and exits 0.
trap 'kill -TERM "$SERVER_PID" 2>/dev/null || true' INT TERM
cleanup() { rm -f "$PORT_FILE"; }
trap cleanup EXIT

# --port_file is written once every model is loaded and warmed up.
for _ in $(seq 1 600); do
  if [ -s "$PORT_FILE" ] || ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
  sleep 0.1
done
if [ -s "$PORT_FILE" ] && [ -n "${PERFORMER_DEMO_PROMPT-x}" ]; then
  PROMPT="${PERFORMER_DEMO_PROMPT:-The meaning of life is}"
  ADDRESS="localhost:$(cat "$PORT_FILE")"
  echo
  echo "\$ $BUILD_DIR/tools/performer-client --server=$ADDRESS generate --seed=1 \"$PROMPT\""
  printf '%s' "$PROMPT"
  "$BUILD_DIR/tools/performer-client" --server="$ADDRESS" --timeout=60s generate --seed=1 \
    "$PROMPT" || true
  echo
  echo "performer-serve is serving on $ADDRESS (pid $SERVER_PID); Ctrl-C stops it."
fi
status=0
wait "$SERVER_PID" || status=$?
# A signal interrupts the first wait; wait again for the drain to finish.
if kill -0 "$SERVER_PID" 2>/dev/null; then wait "$SERVER_PID" || status=$?; fi
exit "$status"
