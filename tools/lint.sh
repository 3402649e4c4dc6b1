#!/usr/bin/env bash
# clang-tidy over our sources (.clang-tidy). clang cannot read GCC's
# precompiled header, so the compile commands are copied with the PCH flags
# removed. Usage: tools/lint.sh BUILD_DIR [files...] (default: core/ and kernels/ sources).
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
    c["command"] = re.sub(r"-include \S+cmake_pch\.hxx|-Winvalid-pch", "", c["command"])
json.dump(commands, open(sys.argv[2], "w"))
PY
if [ $# -eq 0 ]; then
  set -- $(git ls-files 'core/*.cc' 'kernels/*.cc')
fi
exec clang-tidy -p "$tidy_dir" --quiet "$@"
