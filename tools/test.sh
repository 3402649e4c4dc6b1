#!/usr/bin/env bash
# Builds performer-serve and runs every test suite (README: "build and test").
# Installs the Debian packages it needs when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-$(nproc)}"
# ccache (CMakeLists.txt uses it when present): paths under the checkout are
# hashed relative to it, so a clone elsewhere reuses the cache, and the
# precompiled torch header is cacheable.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$JOBS"
root=$PWD
cd "$BUILD_DIR"
ctest --output-on-failure -j "$JOBS" --output-junit "$PWD/ctest-junit.xml" "$@"
# Only tests labelled cuda or deploy may skip: ctest itself reports any
# GoogleTest skip as "Skipped", whatever the test's properties.
ctest --show-only=json-v1 "$@" >ctest-tests.json
python3 "$root/tools/check_ctest_skips.py" ctest-junit.xml ctest-tests.json
