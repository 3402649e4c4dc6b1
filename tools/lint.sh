#!/usr/bin/env bash
# clang-tidy over our sources (.clang-tidy). clang cannot read GCC's
# precompiled header, so the compile commands are copied with the PCH flags
# removed, and without -Werror: the build holds GCC's warnings, and clang's
# own are reported here only where a check names them (clang-diagnostic-*).
# Usage: tools/lint.sh BUILD_DIR [clang-tidy options...] [files...]
#   (default files: core/ and kernels/ sources)
#   LINT_JOBS=N  files checked at once (default 1)
# Exits non-zero when clang-tidy reports an error for any file.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
shift || true
tidy_dir="$build_dir/tidy"
mkdir -p "$tidy_dir"
python3 - "$build_dir/compile_commands.json" "$tidy_dir/compile_commands.json" <<'PY'
import json, re, sys
commands = json.load(open(sys.argv[1]))
for c in commands:
    c["command"] = re.sub(r"-include \S+cmake_pch\.hxx|-Winvalid-pch|-Werror\b", "", c["command"])
json.dump(commands, open(sys.argv[2], "w"))
PY
options=()
files=()
for arg in "$@"; do
  case "$arg" in
    -*) options+=("$arg") ;;
    *) files+=("$arg") ;;
  esac
done
if [ ${#files[@]} -eq 0 ]; then
  mapfile -t files < <(git ls-files 'core/*.cc' 'kernels/*.cc')
fi
printf '%s\n' "${files[@]}" |
  xargs -P "${LINT_JOBS:-1}" -n 1 clang-tidy -p "$tidy_dir" --quiet "${options[@]}"
