#!/usr/bin/env bash
# Builds and runs the CUDA tests and GPU benchmarks on the GPU machine
# (docs/gpu.md). Needs third_party/googletest and third_party/nlohmann; with
# third_party/absl (Debian's libabsl-dev, copied) it also builds core/ and
# runs the unit and fixture-parity suites (the parity suite's CUDA cases
# included) with the fixtures from third_party/fixtures, and the whole-model
# decode benchmark. Every step runs even when an earlier one failed; logs go
# to $OUT (or build-gpu/logs), and are also packed into logs.tar.gz there.
#
#   bash tools/gpu_check.sh [kernels|all]   (default: all)
set -u
stage=${1:-all}
out=${OUT:-build-gpu/logs}
mkdir -p "$out"
logs=$(mktemp -d)
status=0
step() {  # step NAME COMMAND...: runs COMMAND, logs to $logs/NAME.log
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc ($((SECONDS - start)) s)"
  if [ $rc -ne 0 ]; then
    status=1
    grep -E "error|FAILED|Error|ERROR" "$logs/$name.log" | head -30
    tail -8 "$logs/$name.log"
  fi
  return $rc
}
# gtest_until_done NAME BINARY [EXCLUDED]: runs a GoogleTest binary
# (without the tests of the negative filter EXCLUDED); if it crashes, names
# the test that was running and runs the rest without it (5 times at most),
# so that one crash does not hide the other results.
gtest_until_done() {
  local name=$1 binary=$2 filter=-${3:-NONE}
  for attempt in 1 2 3 4 5; do
    step "$name.$attempt" "$binary" --gtest_brief=0 --gtest_filter="$filter"
    local rc=$?
    grep -E "^\[  (PASSED|FAILED|SKIPPED) +\]|^\[  FAILED  \] .*\(" "$logs/$name.$attempt.log" | tail -25
    [ $rc -lt 128 ] && return
    local crashed
    crashed=$(grep -E '^\[ RUN      \]' "$logs/$name.$attempt.log" | tail -1 | awk '{print $4}')
    echo "!! $name crashed (rc=$rc) in $crashed"
    filter="$filter:$crashed"
  done
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
core=OFF
extra=()
targets=(performer_cuda_tests gpu_kernel_bench)
if [ "$stage" != kernels ] && [ -d third_party/absl ]; then
  core=ON
  absl_prefix=$PWD/third_party/absl/usr
  extra=(-Dabsl_DIR="$absl_prefix/lib/x86_64-linux-gnu/cmake/absl")
  export LD_LIBRARY_PATH=$absl_prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  export PERFORMER_FIXTURES=$PWD/third_party/fixtures
  targets+=(performer_unit_tests performer_parity_tests gpu_decode_bench)
fi
step configure cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPERFORMER_BUILD_CORE=$core -DPERFORMER_BUILD_SERVER=OFF \
  -DPERFORMER_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DCMAKE_CUDA_ARCHITECTURES=90 "${extra[@]}" || exit 1
step build ninja -C build-gpu -k 0 "${targets[@]}"

gtest_until_done cuda_tests build-gpu/tests/performer_cuda_tests
step memcheck timeout 300 /usr/local/cuda/bin/compute-sanitizer --tool memcheck \
  --error-exitcode 1 build-gpu/tests/performer_cuda_tests --gtest_brief=1
tail -3 "$logs/memcheck.log"
step gpu_kernel_bench build-gpu/gpu_kernel_bench
cat "$logs/gpu_kernel_bench.log"
# Nsight Compute on each decode-step kernel at B = 256 (launch 29 of each:
# 13 per batch size for B = 1 and 64, then 3 warm-ups) and on the prefill at
# L = 65536 (the last one).
if command -v ncu >/dev/null; then
  step ncu_decode ncu --kernel-name regex:'LinearStateStepKernel' --launch-skip 29 \
    --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section MemoryWorkloadAnalysis --section WarpStateStats build-gpu/gpu_kernel_bench
  step ncu_decode_vector ncu --kernel-name regex:'LinearStateStepVectorKernel' --launch-skip 29 \
    --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section MemoryWorkloadAnalysis --section WarpStateStats build-gpu/gpu_kernel_bench
  step ncu_prefill ncu --kernel-name regex:CausalLinearPrefillKernel --launch-skip 101 \
    --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats \
    build-gpu/gpu_kernel_bench
  grep -E "Throughput|Achieved Occupancy|Theoretical Occupancy|Duration|Registers|Stall|Warp Cycles" \
    "$logs/ncu_decode.log" "$logs/ncu_decode_vector.log" "$logs/ncu_prefill.log" | head -60
fi
if [ "$core" = ON ]; then
  gtest_until_done parity build-gpu/tests/performer_parity_tests
  step gpu_decode_bench build-gpu/gpu_decode_bench
  cat "$logs/gpu_decode_bench.log"
  gtest_until_done unit build-gpu/tests/performer_unit_tests
fi
tar -C "$logs" -czf "$out/logs.tar.gz" .
exit $status
