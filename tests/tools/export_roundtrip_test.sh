#!/usr/bin/env bash
# End-to-end check of tools/export_performer.py: every performer fixture's weights (the
# repository's tests/fixtures/performer) are turned into a PyTorch checkpoint (.pt), exported again
# with the CLI, and the C++ parity suite is run on the exported folders instead of the originals
# (case.json and io.safetensors are copied unchanged), so the C++ outputs must still match the
# goldens. The exported tree is handed to the parity binary as its external root
# (PERFORMER_FIXTURES), whose cases it runs as External/PerformerParity.Case/<case>.
#
# Usage: export_roundtrip_test.sh PATH/TO/performer_parity_tests
# Environment:
#   PYTHON                   Python with torch + numpy (default /usr/bin/python3)
#   PARITY_FILTER            gtest filter (default External/PerformerParity.*)
#   EXPORT_ROUNDTRIP_KEEP=1  keep the temporary fixture tree (its path is printed)
#   STEP_TIMEOUT             seconds each step (conversion, each export, the parity run) may take
#                            (default 600)
# Exit status: the parity binary's; 1 when the filter selects no test (nothing was checked), an
# export fails or the fixtures are missing.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 PATH/TO/performer_parity_tests" >&2
  exit 2
fi
BIN=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ROOT=$REPO/tests/fixtures
PY=${PYTHON:-/usr/bin/python3}
EXPORTER=$REPO/tools/export_performer.py
FILTER=${PARITY_FILTER:-External/PerformerParity.*}

if [[ ! -d $ROOT/performer ]]; then
  echo "error: fixture folder $ROOT/performer is missing from the checkout" >&2
  exit 1
fi
if [[ ! -x $BIN ]]; then
  echo "error: parity test binary '$BIN' is not executable" >&2
  exit 2
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/export_roundtrip.XXXXXX")
cleanup() {
  if [[ ${EXPORT_ROUNDTRIP_KEEP:-0} == 1 ]]; then
    echo "kept temporary fixture tree: $TMP"
  else
    rm -rf "$TMP"
  fi
}
trap cleanup EXIT
mkdir -p "$TMP/performer" "$TMP/ckpt" "$TMP/log"

cases=()
for dir in "$ROOT"/performer/*/; do
  dir=${dir%/}
  if [[ -f $dir/case.json && -f $dir/config.json && -f $dir/weights.safetensors ]]; then
    cases+=("$(basename "$dir")")
  fi
done
if [[ ${#cases[@]} -eq 0 ]]; then
  echo "error: no cases (case.json + config.json + weights.safetensors) in $ROOT/performer" >&2
  exit 1
fi
echo "round-tripping ${#cases[@]} cases from $ROOT/performer through .pt checkpoints"

# Every step runs under `timeout` (seconds): a hung step fails the test.
STEP_TIMEOUT=${STEP_TIMEOUT:-600}

# 1. Original weights -> .pt (checkpoint dict with state_dict, constructor keywords, model_class),
#    read with the exporter's own safetensors reader.
timeout "$STEP_TIMEOUT" "$PY" - "$EXPORTER" "$ROOT/performer" "$TMP/ckpt" "${cases[@]}" <<'PYEOF'
import importlib.util, json, os, sys
import torch
spec = importlib.util.spec_from_file_location("export_performer", sys.argv[1])
ep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ep)
src, dst = sys.argv[2], sys.argv[3]
for case in sys.argv[4:]:
    state_dict, _ = ep.read_safetensors(os.path.join(src, case, "weights.safetensors"))
    with open(os.path.join(src, case, "config.json")) as f:
        config = json.load(f)
    model_class = config.pop("model_class")
    torch.save({"state_dict": state_dict, "config": config, "model_class": model_class},
               os.path.join(dst, case + ".pt"))
PYEOF

# 2. .pt -> exporter CLI (float32: other dtypes change the outputs), a few processes at a time.
JOBS=$(nproc 2>/dev/null || echo 2)
printf '%s\n' "${cases[@]}" | xargs -P "$JOBS" -n 1 bash -c '
  py=$1 exporter=$2 tmp=$3 step_timeout=$4 case=$5
  if ! timeout "$step_timeout" "$py" "$exporter" "$tmp/ckpt/$case.pt" "$tmp/performer/$case" >"$tmp/log/$case.log" 2>&1; then
    echo "error: export of $case failed:" >&2
    cat "$tmp/log/$case.log" >&2
    exit 1
  fi' _ "$PY" "$EXPORTER" "$TMP" "$STEP_TIMEOUT" || { echo "error: exporting failed" >&2; exit 1; }

# 3. Everything else of the case (case.json, io.safetensors, ...) is copied unchanged.
for case in "${cases[@]}"; do
  out=$TMP/performer/$case
  if [[ ! -f $out/config.json || ! -f $out/weights.safetensors ]]; then
    echo "error: exporter wrote no config.json/weights.safetensors for $case" >&2
    exit 1
  fi
  for f in "$ROOT/performer/$case"/*; do
    name=$(basename "$f")
    [[ $name == config.json || $name == weights.safetensors ]] && continue
    cp -R "$f" "$out/"
  done
done
[[ -f $ROOT/performer/README.md ]] && cp "$ROOT/performer/README.md" "$TMP/performer/"

# 4. The C++ parity suite on the exported tree. A filter that selects nothing would pass vacuously.
listing=$(PERFORMER_FIXTURES=$TMP timeout "$STEP_TIMEOUT" "$BIN" --gtest_list_tests --gtest_filter="$FILTER")
if ! grep -q '^  ' <<<"$listing"; then
  echo "error: '$BIN' has no test matching --gtest_filter='$FILTER'; parity not checked" >&2
  exit 1
fi
rc=0
PERFORMER_FIXTURES=$TMP timeout "$STEP_TIMEOUT" "$BIN" --gtest_filter="$FILTER" || rc=$?
exit "$rc"
