#!/usr/bin/env bash
# Installs the Debian 12 packages that building and testing performer-serve needs.
# Idempotent: packages already present are not reinstalled, and apt is only
# called when something is missing.
#   --fuzz   also clang and its libFuzzer runtime (tools/fuzz.sh)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libopenblas0-openmp
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libssl-dev openssl
  libabsl-dev prometheus-cpp-dev prometheus
  libgtest-dev libgmock-dev googletest libbenchmark-dev libboost-dev
  libspdlog-dev libsentencepiece-dev
  nlohmann-json3-dev
  python3 python3-torch python3-numpy python3-grpcio python3-protobuf python3-yaml
  fortunes haproxy curl
  clang-format clang-tidy
)
if [ "${1:-}" = "--fuzz" ]; then PACKAGES+=(clang-14 libclang-rt-14-dev); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# The integration tests run Node's @grpc/grpc-js: any node >= 18 with npm
# will do (a machine may already have one from elsewhere than Debian).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
