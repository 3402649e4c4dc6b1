#!/usr/bin/env bash
# Builds performer-serve and starts it on the repository's default model
# (models/, see models/README.md), listening on port 50051 (gRPC) and 8000
# (HTTP: the OpenAI-compatible API) (README: "build and run"). Once the server is ready it streams one completion of the
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
# The server's log goes to a file until the demo completion is shown (so
# that request lines do not cut through the streamed text), then is followed.
LOG="$BUILD_DIR/performer-serve.log"
"$BUILD_DIR/server/performer-serve" --port_file="$PORT_FILE" --http_port=8000 "$@" 2>"$LOG" &
SERVER_PID=$!
# Ctrl-C / SIGTERM go to the server, which drains and exits 0.
trap 'kill -TERM "$SERVER_PID" 2>/dev/null || true' INT TERM
cleanup() { rm -f "$PORT_FILE" "$PORT_FILE.client"; }
trap cleanup EXIT

# --port_file is written once every model is loaded and warmed up.
for _ in $(seq 1 600); do
  if [ -s "$PORT_FILE" ] || ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
  sleep 0.1
done
if [ -s "$PORT_FILE" ] && [ -n "${PERFORMER_DEMO_PROMPT-x}" ]; then
  PROMPT="${PERFORMER_DEMO_PROMPT:-The meaning of life is}"
  ADDRESS="localhost:$(cat "$PORT_FILE")"
  echo "performer-serve is ready on $ADDRESS; a completion of the default model, streamed:"
  echo
  echo "\$ $BUILD_DIR/tools/performer-client --server=$ADDRESS generate --seed=1 \"$PROMPT\""
  printf '%s' "$PROMPT"
  # The client's summary (finish reason, tokens/s, time to first token) is
  # on stderr: shown under the text rather than glued to its last line.
  "$BUILD_DIR/tools/performer-client" --server="$ADDRESS" --timeout=60s generate --seed=1 \
    "$PROMPT" 2>"$PORT_FILE.client" || true
  echo
  cat "$PORT_FILE.client"
  echo "performer-serve keeps serving on $ADDRESS (pid $SERVER_PID); Ctrl-C stops it. Its log:"
fi
# The log so far, then as it grows, until the server exits.
tail -n +1 -f --pid="$SERVER_PID" "$LOG" >&2 &
status=0
wait "$SERVER_PID" || status=$?
# A signal interrupts the first wait; wait again for the drain to finish.
if kill -0 "$SERVER_PID" 2>/dev/null; then wait "$SERVER_PID" || status=$?; fi
sleep 0.3  # let tail print the last lines
exit "$status"
