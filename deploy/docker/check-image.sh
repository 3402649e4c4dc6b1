#!/usr/bin/env bash
# Builds the CPU image (the top-level Dockerfile), runs it as Kubernetes
# would (non-root, read-only root, no capabilities), and checks it:
#   - the image's user is numeric and not root, every library the binaries
#     load resolves inside it (the loader's --list), and its size;
#   - the container serves the default model to a real gRPC client
#     (performer-client, from the image, in a second container): list, and
#     a generated text;
#   - /metrics answers with the server's metrics;
#   - SIGTERM while a stream runs: the stream still completes, the server
#     logs its drain and stops, and the container exits 0;
#   - deploy/docker/cuda.Dockerfile, which cannot be built without NVIDIA's
#     CUDA images and a CUDA LibTorch: it parses, and its libtorch stage
#     (on debian:12) downloads, checks and unpacks a stand-in LibTorch zip
#     served from this machine.
#
#   deploy/docker/check-image.sh [--no-build] [IMAGE]   (default performer-serve:check)
#
# Needs a Docker daemon: without one (docker info fails) it says so and exits
# 77 (ctest's skip). Without the base images it makes them with
# base-images.sh when it can (root, debootstrap), else it skips too.
# Containers use the host's network (--network host), builds too.
# Exit status: 0 passed, 1 failed, 77 skipped.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build=1
if [[ ${1:-} == --no-build ]]; then
  build=0
  shift
fi
image=${1:-performer-serve:check}
name="performer-serve-check-$$"
client_name="performer-client-check-$$"

say() { echo "check-image: $*"; }
fail() { echo "check-image: FAIL: $*" >&2; exit 1; }
skip() { echo "check-image: SKIP: $*" >&2; exit 77; }

command -v docker >/dev/null 2>&1 || skip "no docker command"
docker info >/dev/null 2>&1 || skip "no Docker daemon answers (docker info failed): image not built or checked"

cleanup() {
  docker rm -f "$name" "$client_name" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# --- Build ---------------------------------------------------------------------
if (( build )); then
  if ! docker image inspect debian:12 >/dev/null 2>&1 || ! docker image inspect debian:12-slim >/dev/null 2>&1; then
    if docker pull debian:12 >/dev/null 2>&1 && docker pull debian:12-slim >/dev/null 2>&1; then
      say "pulled debian:12 and debian:12-slim"
    elif (( EUID == 0 )) && command -v debootstrap >/dev/null 2>&1; then
      say "no debian:12 / debian:12-slim: making them (base-images.sh)"
      "$root/deploy/docker/base-images.sh" || fail "base-images.sh failed"
    else
      skip "no debian:12 / debian:12-slim images and no registry; run deploy/docker/base-images.sh as root"
    fi
  fi
  say "docker build -t $image ."
  start=$SECONDS
  docker build --network host -t "$image" "$root" > "${TMPDIR:-/tmp}/check-image-build.log" 2>&1 ||
    { tail -n 40 "${TMPDIR:-/tmp}/check-image-build.log" >&2; fail "docker build failed"; }
  say "built in $(( SECONDS - start )) s (log: ${TMPDIR:-/tmp}/check-image-build.log)"
fi
docker image inspect "$image" >/dev/null 2>&1 || fail "no image $image"

# --- The CUDA Dockerfile parses ---------------------------------------------------
# A --target that does not exist: the daemon parses the whole file, then stops.
out=$(docker build -f "$root/deploy/docker/cuda.Dockerfile" --target no-such-stage "$root" 2>&1 || true)
grep -q 'failed to reach build target no-such-stage' <<<"$out" ||
  fail "deploy/docker/cuda.Dockerfile does not parse: $(tail -n 2 <<<"$out")"
say "deploy/docker/cuda.Dockerfile parses"

# --- The image -----------------------------------------------------------------
size=$(docker image inspect -f '{{.Size}}' "$image")
say "image $image: $(( size / 1000000 )) MB ($(( size >> 20 )) MiB)"
user=$(docker image inspect -f '{{.Config.User}}' "$image")
uid=${user%%:*}
[[ $uid =~ ^[0-9]+$ && $uid != 0 ]] || fail "image user '$user' is not a numeric non-root UID"
say "image user $user"
for binary in /usr/local/bin/performer-serve /usr/local/bin/performer-client \
              /usr/local/lib/libperformer_sentencepiece.so; do
  # The dynamic loader's --list is ldd without ldd (not in a minimal image).
  out=$(docker run --rm --network none --entrypoint /bin/sh "$image" \
          -c 'set -- /lib*/ld-linux*.so.* "$0"; exec "$1" --list "$0"' "$binary") ||
    fail "the loader cannot list the libraries of $binary in the image"
  if grep -q 'not found' <<<"$out"; then
    fail "$binary: libraries missing in the image: $(grep 'not found' <<<"$out" | tr '\n' ' ')"
  fi
  say "$binary: $(grep -c '=>' <<<"$out") libraries, all found (the loader's --list)"
done

# --- Run it as a pod would -------------------------------------------------------
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
    echo $(( 20000 + RANDOM % 20000 ))
}
port=$(free_port)
metrics_port=$(free_port)
# --step_delay_ms slows every engine step so that a stream is still running
# when SIGTERM comes; --drain_timeout lets it finish.
docker run -d --name "$name" --network host --read-only --tmpfs /tmp \
  --cap-drop ALL --security-opt no-new-privileges \
  "$image" --port="$port" --metrics_port="$metrics_port" --metrics_host=127.0.0.1 \
  --drain_timeout=60s --step_delay_ms=20 >/dev/null
say "container $name: --port=$port --metrics_port=$metrics_port (read-only root, no capabilities)"

client() {
  docker run --rm --name "$client_name" --network host --read-only --cap-drop ALL \
    --entrypoint /usr/local/bin/performer-client "$image" --server="127.0.0.1:$port" "$@"
}
deadline=$(( SECONDS + 180 ))
until models=$(client list 2>/dev/null); do
  if [[ $(docker inspect -f '{{.State.Running}}' "$name") != true ]]; then
    docker logs "$name" 2>&1 | tail -n 20 >&2
    fail "the server exited before it was ready"
  fi
  (( SECONDS < deadline )) || fail "the server did not answer within 180 s"
  sleep 1
done
say "performer-client list:"
sed 's/^/    /' <<<"$models"
grep -q 'performer-fortunes' <<<"$models" || fail "the default model is not listed"
running_uid=$(docker exec "$name" /usr/bin/id -u)
[[ $running_uid == "$uid" ]] || fail "the server runs as UID $running_uid, not $uid"
say "the server runs as UID $running_uid"

text=$(client --temperature=0 --max_new_tokens=24 generate "The best way to" 2>/dev/null) ||
  fail "generate failed"
[[ -n $text ]] || fail "generate returned no text"
say "performer-client generate 'The best way to' (greedy, 24 tokens): $(tr '\n' ' ' <<<"$text")"

scrape() {  # GET /metrics from inside the container (bash's /dev/tcp: no HTTP client needed)
  docker exec "$name" /bin/bash -c \
    "exec 3<>/dev/tcp/127.0.0.1/$metrics_port && printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 && cat <&3"
}
metrics=$(scrape) || fail "GET /metrics failed"
for metric in performer_model_info performer_engine_free_slots performer_engine_queued_requests \
              performer_requests_total performer_generated_tokens_total; do
  grep -q "^$metric" <<<"$metrics" || fail "/metrics lacks $metric"
done
say "/metrics: $(grep -c '^performer_' <<<"$metrics") performer_ samples; $(grep '^performer_generated_tokens_total' <<<"$metrics" | head -n 1)"

# --- SIGTERM with a stream running: drain ---------------------------------------------
stream_out="${TMPDIR:-/tmp}/check-image-stream.$$"
# 1000 tokens at --step_delay_ms=20: about 20 s of streaming.
client --temperature=0 --max_new_tokens=1000 generate "Once upon a time" >"$stream_out" 2>&1 &
stream=$!
deadline=$(( SECONDS + 60 ))
until scrape | grep -q '^performer_engine_active_sequences{.*} [1-9]'; do
  kill -0 "$stream" 2>/dev/null || fail "the stream ended before SIGTERM: $(cat "$stream_out")"
  (( SECONDS < deadline )) || fail "the stream did not start within 60 s"
  sleep 0.5
done
say "SIGTERM (docker stop -t 90) with a stream running"
start=$SECONDS
docker stop -t 90 "$name" >/dev/null
stopped=$(( SECONDS - start ))
stream_status=0
wait "$stream" || stream_status=$?
exit_code=$(docker inspect -f '{{.State.ExitCode}}' "$name")
logs=$(docker logs "$name" 2>&1)
grep -q '"drain"' <<<"$logs" || fail "no drain event in the server's log"
grep -q '"stopped"' <<<"$logs" || fail "no stopped event in the server's log"
(( stream_status == 0 )) || fail "the running stream failed during the drain: $(tail -n 3 "$stream_out")"
[[ $exit_code == 0 ]] || fail "the container exited with $exit_code"
say "the stream completed ($(grep -o 'finish=.*' "$stream_out" | tail -n 1)); the server drained and stopped in ${stopped} s; exit code 0"
rm -f "$stream_out"

# --- The CUDA image's libtorch stage, with a stand-in LibTorch ---------------------------
if command -v python3 >/dev/null 2>&1; then
  stand_in=$(mktemp -d)
  mkdir -p "$stand_in/zip/libtorch/share/cmake/Torch" "$stand_in/www"
  echo "# stand-in" > "$stand_in/zip/libtorch/share/cmake/Torch/TorchConfig.cmake"
  (cd "$stand_in/zip" && python3 -c 'import shutil; shutil.make_archive("../www/libtorch", "zip", ".")')
  sha=$(sha256sum "$stand_in/www/libtorch.zip" | cut -d' ' -f1)
  http_port=$(free_port)
  python3 -m http.server "$http_port" --bind 127.0.0.1 --directory "$stand_in/www" >/dev/null 2>&1 &
  http=$!
  sleep 1
  build_stage() {
    docker build --network host -f "$root/deploy/docker/cuda.Dockerfile" --target libtorch \
      --build-arg LIBTORCH_URL="http://127.0.0.1:$http_port/libtorch.zip" --build-arg LIBTORCH_SHA256="$1" \
      -t performer-serve-check-libtorch "$root" > "$stand_in/build.log" 2>&1
  }
  build_stage 0000000000000000000000000000000000000000000000000000000000000000 &&
    { kill "$http"; fail "the libtorch stage accepted a zip whose SHA-256 does not match"; }
  build_stage "$sha" || { kill "$http"; tail -n 20 "$stand_in/build.log" >&2; fail "the libtorch stage failed"; }
  kill "$http"
  docker rmi performer-serve-check-libtorch >/dev/null 2>&1 || true
  rm -rf "$stand_in"
  say "deploy/docker/cuda.Dockerfile: its libtorch stage refuses a wrong SHA-256 and unpacks a stand-in LibTorch"
fi
say "OK"
