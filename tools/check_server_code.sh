#!/usr/bin/env bash
# What server/ holds itself to beyond the compiler's warnings, checked with
# clang over every server/ source (ctest unit.server_code):
#   * clang's thread-safety analysis (-Wthread-safety): every member marked
#     ABSL_GUARDED_BY is read and written with its lock held, every function
#     marked ABSL_EXCLUSIVE_LOCKS_REQUIRED is called with it;
#   * no function longer than 80 lines (readability-function-size).
# Both are errors. Needs the build's compile_commands.json (the build itself
# uses GCC). Usage: tools/check_server_code.sh BUILD_DIR [files...]
#   LINT_JOBS=N  files checked at once (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="$(realpath "${1:-build}")"
shift || true
if [ $# -eq 0 ]; then
  mapfile -t sources < <(find server -name '*.cc' | sort)
  set -- "${sources[@]}"
fi
checks='-*,readability-function-size,clang-diagnostic-thread-safety*'
config="{Checks: '$checks', WarningsAsErrors: '*', CheckOptions: [{key: readability-function-size.LineThreshold, value: 80}]}"
LINT_JOBS="${LINT_JOBS:-2}" bash tools/lint.sh "$build_dir" "--config=$config" \
  --extra-arg=-Wthread-safety "--header-filter=^$PWD/server/" "$@"
echo "server code: thread safety and function size checked in $# files"
