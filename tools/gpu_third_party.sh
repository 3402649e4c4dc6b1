#!/usr/bin/env bash
# Fills the git-ignored third_party/ folder with what tools/gpu_check.sh needs
# on the GPU machine, which has CUDA, CMake, ninja and PyTorch but no network
# and none of our other dependencies (docs/gpu.md). Run on the Debian 12
# development machine, from anywhere:
#
#   bash tools/gpu_third_party.sh [--fla DIR] [--performer-pytorch DIR]
#
#   third_party/googletest   GoogleTest's sources (built there)
#   third_party/nlohmann     nlohmann/json's header
#   third_party/sysroot      Debian's packages of Abseil, gRPC, protobuf (with
#                            protoc and grpc_cpp_plugin), prometheus-cpp,
#                            spdlog, fmt, SentencePiece, OpenSSL, Google
#                            Benchmark and their libraries, unpacked
#                            (apt-get download + dpkg -x): a /usr tree whose
#                            CMake packages find themselves
#   third_party/fla          with --fla DIR: the fla/ package of a checkout of
#                            flash-linear-attention (pure Python and Triton),
#                            for bench/fla_prefill_bench.py
#   third_party/performer_pytorch_root
#                            with --performer-pytorch DIR: the packages
#                            performer_pytorch, einops, local_attention and
#                            axial_positional_embedding (pure Python), which
#                            DIR holds side by side, for
#                            bench/performer_pytorch_bench.py
# About 50 MB; a device call carries it with the working tree (64 MiB in all).
set -euo pipefail
cd "$(dirname "$0")/.."
fla=""
reference=""
while [ $# -gt 0 ]; do
  case $1 in
    --fla) fla=$2; shift 2 ;;
    --performer-pytorch) reference=$2; shift 2 ;;
    *) echo "usage: $0 [--fla DIR] [--performer-pytorch DIR]" >&2; exit 2 ;;
  esac
done

out=third_party
rm -rf "$out"
mkdir -p "$out"
cp -r /usr/src/googletest "$out/"
cp -r /usr/include/nlohmann "$out/"

# The server's build and run-time dependencies. Only what the GPU machine's
# image lacks; its C and C++ runtimes (newer than Debian 12's) serve these
# libraries too.
packages=(
  libabsl-dev libabsl20220623
  libgrpc++-dev libgrpc-dev libgrpc++1.51 libgrpc29 protobuf-compiler-grpc
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 libprotoc32 protobuf-compiler
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0
  libprometheus-cpp-push1.0 libcivetweb-dev libcivetweb1
  libcurl4-openssl-dev libcurl4
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libsentencepiece-dev libsentencepiece0
  libssl-dev libssl3 libc-ares-dev libc-ares2 libre2-dev libre2-9
  zlib1g-dev zlib1g
  libbenchmark-dev libbenchmark1debian
)
debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
(cd "$debs" && apt-get download "${packages[@]}" >/dev/null)
for deb in "$debs"/*.deb; do dpkg -x "$deb" "$out/sysroot"; done
rm -rf "$out/sysroot/usr/share/doc" "$out/sysroot/usr/share/man" "$out/sysroot/usr/share/lintian"
rm -rf "$out/googletest/docs"
# Size (a device call carries 64 MiB): static archives go, except those a
# CMake package names; so do gRPC's insecure-only libraries.
lib=$out/sysroot/usr/lib/x86_64-linux-gnu
named=$(grep -rhoE 'lib[A-Za-z0-9_+.-]+\.a\b' "$lib/cmake" | sort -u)
for archive in "$lib"/*.a; do
  grep -qxF "$(basename "$archive")" <<<"$named" || rm "$archive"
done
rm -f "$lib"/libgrpc_unsecure.so* "$lib"/libgrpc++_unsecure.so*
# CMake packages check that each imported target's file exists: the checks of
# the files not carried (those above, civetweb's server program) go.
python3 - "$lib/cmake" <<'PY'
import glob, os, re, sys
cmake_dir = sys.argv[1]
prefix = os.path.dirname(os.path.dirname(os.path.dirname(cmake_dir)))  # the tree's usr
for path in glob.glob(os.path.join(cmake_dir, "**", "*.cmake"), recursive=True):
    text = open(path).read()
    missing = set()
    for target, files in re.findall(r'list\(APPEND _cmake_import_check_files_for_(\S+) (.*)\)', text):
        for f in re.findall(r'"([^"]+)"', files):
            if not os.path.exists(f.replace("${_IMPORT_PREFIX}", prefix)):
                missing.add(target)
    if not missing:
        continue
    lines = [l for l in text.splitlines(keepends=True)
             if not any(re.search(r"_cmake_import_check_\w*\s*%s[ )]" % re.escape(t), l) for t in missing)]
    open(path, "w").writelines(lines)
PY
# Absolute links (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) would
# point into the GPU machine's own /lib: made relative, inside the tree.
root=$(cd "$out/sysroot" && pwd)
find "$root" -type l | while read -r link; do
  target=$(readlink "$link")
  case $target in
    /*) if [ -e "$root$target" ]; then
          ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$root$target")" "$link"
        fi ;;
  esac
done

if [ -n "$fla" ]; then
  if [ ! -d "$fla/fla/ops/linear_attn" ]; then
    echo "$fla has no fla/ops/linear_attn: not a flash-linear-attention checkout" >&2
    exit 2
  fi
  # chunk_linear_attn and what it imports (fla.ops.linear_attn runs on
  # fla.ops.simple_gla and the shared ops; fla.ops.kda uses
  # fla.modules.l2norm); the bench imports it without running fla's and
  # fla.ops's __init__ (models, layers and the other ops).
  mkdir -p "$out/fla/ops"
  cp -r "$fla/fla/utils" "$fla/fla/modules" "$out/fla/"
  for op in attn backends common cp gla kda linear_attn simple_gla utils; do
    cp -r "$fla/fla/ops/$op" "$out/fla/ops/"
  done
  cp "$fla/fla/__init__.py" "$out/fla/"  # read for its version only
  cp "$fla/LICENSE" "$out/fla/" 2>/dev/null || true
  find "$out/fla" -name __pycache__ -prune -exec rm -rf {} +
fi
if [ -n "$reference" ]; then
  reference_packages=(performer_pytorch einops local_attention axial_positional_embedding)
  for package in "${reference_packages[@]}"; do
    if [ ! -f "$reference/$package/__init__.py" ]; then
      echo "$reference has no $package/ package" >&2
      exit 2
    fi
  done
  mkdir -p "$out/performer_pytorch_root"
  for package in "${reference_packages[@]}"; do
    cp -r "$reference/$package" "$out/performer_pytorch_root/"
  done
  find "$out/performer_pytorch_root" -name __pycache__ -prune -exec rm -rf {} +
fi
# gRPC's CMake package finds RE2 by its CMake package, else by pkg-config,
# which the GPU machine may lack; Debian's libre2-dev ships neither, so the
# tree gets a package of its own.
mkdir -p "$lib/cmake/re2"
cat >"$lib/cmake/re2/re2Config.cmake" <<'CMAKE'
# RE2 from this tree (tools/gpu_third_party.sh).
if(NOT TARGET re2::re2)
  get_filename_component(_re2_usr "${CMAKE_CURRENT_LIST_DIR}/../../../.." ABSOLUTE)
  add_library(re2::re2 SHARED IMPORTED)
  set_target_properties(re2::re2 PROPERTIES
    IMPORTED_LOCATION "${_re2_usr}/lib/x86_64-linux-gnu/libre2.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_re2_usr}/include")
endif()
set(re2_FOUND TRUE)
CMAKE
du -sh "$out"
