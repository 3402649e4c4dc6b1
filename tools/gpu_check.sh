#!/usr/bin/env bash
# Builds and runs, on the GPU machine, everything that needs a GPU
# (docs/gpu.md): the CUDA kernel tests, the fixture-parity suite (its CUDA
# cases included), performer-serve --device=cuda driven over gRPC by
# serve_bench (also with the prefix cache in host memory, and with 8 tokens
# per message at 256 streams) and by the Python
# client (twice with one prompt: the second resumes from the prefix cache's
# state, in device memory, then in host memory), the same-bits suite
# (tests/integration/python/test_same_bits.py) against performer-serve
# --device=cuda --cuda_same_bits, the whole-model decode benchmark,
# the kernel benchmark with flash-linear-attention's prefill timed beside
# ours, performer-pytorch's forward and generation on the bench model, the
# unit tests and compute-sanitizer memcheck.
#
#   bash tools/gpu_check.sh [kernels|serve|decode|all]   (default: all)
#
# Needs third_party/ from tools/gpu_third_party.sh (carried to the machine).
# `kernels` builds kernels/ alone (GoogleTest and nlohmann/json only). `all`
# also builds core, the server and the benchmarks against third_party/sysroot;
# `serve` builds and runs only performer-serve, serve_bench and the client;
# `decode` only the decode step: the CUDA tests, the unit tests of the CUDA
# paths, gpu_decode_bench's fused-step and same-bits tables,
# weight_dtype_quality_bench on
# the GPU, gpu_kernel_bench and memcheck of the tests of the fused projection
# and of the state step that projects its own query and key.
# Steps run in order of importance, each logged to $OUT (or build-gpu/logs)
# and packed into logs.tar.gz there; a step that fails does not stop the
# others, and one that would start after PERFORMER_GPU_BUDGET_S seconds (default
# 540) is skipped and named, so that a device call ends inside its limit.
set -u
stage=${1:-all}
out=${OUT:-build-gpu/logs}
budget=${PERFORMER_GPU_BUDGET_S:-540}
mkdir -p "$out"
logs=$(mktemp -d)
status=0
root=$PWD
step() {  # step NAME COMMAND...: runs COMMAND, logs to $logs/NAME.log
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc ($((SECONDS - start)) s, at $SECONDS s)"
  if [ $rc -ne 0 ]; then
    status=1
    grep -E "error|FAILED|Error|ERROR" "$logs/$name.log" | head -30
    tail -8 "$logs/$name.log"
  fi
  return $rc
}
# time_left SECONDS: true when a step of about SECONDS still fits the budget.
time_left() {
  if [ $((SECONDS + $1)) -gt "$budget" ]; then
    echo "== skipped (budget of $budget s): $2"
    return 1
  fi
}
# gtest_until_done NAME BINARY [SELECTED]: runs a GoogleTest binary (the
# tests of the positive filter SELECTED, default all); if it crashes, names
# the test that was running and runs the rest without it (5 times at most),
# so that one crash does not hide the other results.
gtest_until_done() {
  local name=$1 binary=$2 selected=${3:-*} excluded=NONE
  for attempt in 1 2 3 4 5; do
    step "$name.$attempt" timeout 300 "$binary" --gtest_brief=0 \
      --gtest_filter="$selected-$excluded"
    local rc=$?
    grep -E "^\[  (PASSED|FAILED|SKIPPED) +\]|^\[  FAILED  \] .*\(" "$logs/$name.$attempt.log" | tail -25
    [ $rc -lt 128 ] && return
    local crashed
    crashed=$(grep -E '^\[ RUN      \]' "$logs/$name.$attempt.log" | tail -1 | awk '{print $4}')
    echo "!! $name crashed (rc=$rc) in $crashed"
    excluded="$excluded:$crashed"
  done
}
# bin NAME: the built executable NAME (bench/ or the top level, by build;
# not the wrappers of build-gpu/wrapped).
bin() { find build-gpu -path build-gpu/wrapped -prune -o -name "$1" -type f -perm -u+x -print | head -1; }
# python_twice NAME [SERVER FLAGS...]: performer-serve --device=cuda on the
# embedded model, and the Python client's same greedy request twice: the
# second resumes from the state the first left in the prefix cache; their
# tokens must be equal.
python_twice() {
  local name=$1
  shift
  rm -f build-gpu/port build-gpu/metrics_port
  build-gpu/server/performer-serve --device=cuda --port=0 --port_file=build-gpu/port \
    --metrics_port=0 --metrics_port_file=build-gpu/metrics_port "$@" \
    >"$logs/$name.server.log" 2>&1 &
  local server=$!
  for _ in $(seq 120); do [ -s build-gpu/port ] && break; sleep 0.5; done
  for run in 1 2; do
    step "$name.$run" env -u LD_LIBRARY_PATH PYTHONPATH=build-gpu/python python3 \
      examples/python/generate.py \
      --target "127.0.0.1:$(cat build-gpu/port 2>/dev/null)" --max_new_tokens 48 \
      --temperature 0 "Once upon a time"
    cat "$logs/$name.$run.log"
  done
  if diff <(grep -v '^\[FINISH' "$logs/$name.1.log") \
    <(grep -v '^\[FINISH' "$logs/$name.2.log") >/dev/null; then
    echo "== $name: the cached prompt's tokens equal the cold prompt's"
  else
    echo "== $name: the cached prompt's tokens differ from the cold prompt's"
    status=1
  fi
  env -u LD_LIBRARY_PATH python3 -c "import sys, urllib.request; sys.stdout.write(
    urllib.request.urlopen(sys.argv[1]).read().decode())" \
    "http://127.0.0.1:$(cat build-gpu/metrics_port 2>/dev/null)/metrics" |
    grep -E "^performer_prefix_cache_(queries|hits)_total"
  kill -TERM $server
  wait $server
  echo "== $name: performer-serve exit status $? (SIGTERM)"
  grep -iE "device|cuda|listening" "$logs/$name.server.log" | head -3
}
finish() {
  tar -C "$logs" -czf "$out/logs.tar.gz" .
  exit $status
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
gcc --version | head -1

torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
sysroot=$root/third_party/sysroot
syslib=$sysroot/usr/lib/x86_64-linux-gnu
core=OFF
extra=()
targets=(performer_cuda_tests gpu_kernel_bench)
if [ "$stage" != kernels ] && [ -d "$sysroot" ]; then
  core=ON
  # Debian's protoc needs Debian's libraries; so does the plugin it starts.
  # The programs get the tree's library folder as DT_RPATH
  # (--disable-new-dtags), which also serves the libraries' own dependencies
  # (absl's among themselves): GoogleTest's discovery runs the test programs
  # during the build.
  mkdir -p build-gpu
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$syslib" "$sysroot/usr/bin/protoc" \
    >build-gpu/protoc
  chmod +x build-gpu/protoc
  extra=(-DCMAKE_PREFIX_PATH="$torch_prefix;$sysroot/usr"
    -DProtobuf_PROTOC_EXECUTABLE="$root/build-gpu/protoc"
    -DPERFORMER_GRPC_CPP_PLUGIN="$sysroot/usr/bin/grpc_cpp_plugin"
    -DPERFORMER_GRPC_PYTHON_PLUGIN="$sysroot/usr/bin/grpc_python_plugin"
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$syslib -Wl,--disable-new-dtags"
    -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$syslib -Wl,--disable-new-dtags"
    -DPERFORMER_WARNINGS_AS_ERRORS=OFF)
  if [ "$stage" = serve ]; then
    targets=(performer-serve serve_bench performer_integration_python_stubs)
  elif [ "$stage" = decode ]; then
    targets+=(performer_unit_tests gpu_decode_bench weight_dtype_quality_bench)
  else
    targets+=(performer_unit_tests performer_parity_tests gpu_decode_bench performer-serve
      serve_bench performer_integration_python_stubs)
  fi
else
  extra=(-DCMAKE_PREFIX_PATH="$torch_prefix")
fi
step configure cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPERFORMER_BUILD_CORE=$core -DPERFORMER_BUILD_SERVER=$core -DPERFORMER_BUILD_BENCH=$core \
  -DCMAKE_CUDA_ARCHITECTURES=90 "${extra[@]}" || finish
step build ninja -C build-gpu -k 0 "${targets[@]}"
# GCC 13 here is newer than the project's compiler: its new warnings are
# reported, not fatal (PERFORMER_WARNINGS_AS_ERRORS=OFF).
grep -E "warning:" "$logs/build.log" | grep -v "build-gpu/proto/" | sort -u | head -20
# The programs built against third_party/sysroot need its libraries (the
# compilers above must not get them); Python (with its own) must not.
if [ "$core" = ON ]; then export LD_LIBRARY_PATH=$syslib; fi

all=true
[ "$stage" = serve ] && all=false
if [ "$stage" = decode ]; then
  gtest_until_done cuda_tests build-gpu/tests/performer_cuda_tests
  gtest_until_done unit_cuda build-gpu/tests/performer_unit_tests '*Cuda*:*CUDA*'
  step fused_step_bench "$(bin gpu_decode_bench)" --fused-only 1
  cat "$logs/fused_step_bench.log"
  step same_bits_bench "$(bin gpu_decode_bench)" --same-bits-only 1
  cat "$logs/same_bits_bench.log"
  step quality "$(bin weight_dtype_quality_bench)" --device=cuda
  cat "$logs/quality.log"
  time_left 60 "gpu_kernel_bench" && step gpu_kernel_bench "$(bin gpu_kernel_bench)"
  cat "$logs/gpu_kernel_bench.log"
  if time_left 60 "memcheck of the fused projection and the projected state step"; then
    step memcheck timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool memcheck \
      --error-exitcode 1 build-gpu/tests/performer_cuda_tests --gtest_brief=1 \
      --gtest_filter='*FusedLinear*:*FavorProjected*'
    tail -3 "$logs/memcheck.log"
  fi
  finish
fi
$all && gtest_until_done cuda_tests build-gpu/tests/performer_cuda_tests
if [ "$core" = ON ]; then
  $all && gtest_until_done parity build-gpu/tests/performer_parity_tests
  if time_left 120 "serve_bench over gRPC"; then
    step serve_bench "$(bin serve_bench)" --device=cuda \
      --concurrency=1,64,256 --requests_per_stream=2 --max_new_tokens=128 --client_cpus=8 \
      --server_binary=build-gpu/server/performer-serve
    grep -E "^\||^- " "$logs/serve_bench.log"
  fi
  if time_left 60 "serve_bench, the prefix cache in host memory"; then
    step serve_bench_cache_on_host "$(bin serve_bench)" --device=cuda \
      --concurrency=64,256 --requests_per_stream=2 --max_new_tokens=128 --client_cpus=8 \
      --engine=false --decoder=false --server_binary=build-gpu/server/performer-serve \
      --server_flags=--prefix_cache_on_device=false
    grep -E "^\| [0-9]" "$logs/serve_bench_cache_on_host.log"
  fi
  if time_left 60 "serve_bench, 8 tokens per message"; then
    step serve_bench_interval "$(bin serve_bench)" --device=cuda \
      --concurrency=256 --requests_per_stream=2 --max_new_tokens=128 --client_cpus=8 \
      --decoder=false --server_binary=build-gpu/server/performer-serve \
      --server_flags=--stream_interval=8
    grep -E "^\| [0-9]" "$logs/serve_bench_interval.log"
  fi
  if time_left 60 "serve_bench, about 8 messages per step"; then
    step serve_bench_messages_per_step "$(bin serve_bench)" --device=cuda \
      --concurrency=256 --requests_per_stream=2 --max_new_tokens=128 --client_cpus=8 \
      --decoder=false --server_binary=build-gpu/server/performer-serve \
      --server_flags=--stream_messages_per_step=8,--max_prefills_per_step=64
    grep -E "^\| [0-9]" "$logs/serve_bench_messages_per_step.log"
  fi
  if time_left 60 "Python client against performer-serve --device=cuda"; then
    python_twice python_device
    python_twice python_host --prefix_cache_on_device=false
  fi
  if time_left 240 "the same bits through performer-serve --device=cuda --cuda_same_bits"; then
    # The suite's Python must not get the sysroot's libraries; the programs
    # it starts (performer-serve, serve_bench beside it) need them.
    for program in server/performer-serve bench/serve_bench; do
      mkdir -p "build-gpu/wrapped/$(dirname $program)"
      printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$syslib" \
        "$root/$(bin "$(basename $program)")" >"build-gpu/wrapped/$program"
      chmod +x "build-gpu/wrapped/$program"
    done
    step same_bits_serve env -u LD_LIBRARY_PATH PERFORMER_SAME_BITS_DEVICE=cuda \
      PERFORMER_SERVE="$root/build-gpu/wrapped/server/performer-serve" \
      PYTHONPATH=build-gpu/python:tests/integration/python \
      timeout 240 python3 tests/integration/python/run_suite.py test_same_bits
    tail -5 "$logs/same_bits_serve.log"
  fi
  if $all && time_left 60 "unit tests of the CUDA paths"; then
    gtest_until_done unit_cuda build-gpu/tests/performer_unit_tests '*Cuda*:*CUDA*'
  fi
  if $all && time_left 90 "gpu_decode_bench"; then
    step gpu_decode_bench "$(bin gpu_decode_bench)"
    cat "$logs/gpu_decode_bench.log"
  fi
fi
if $all && time_left 60 "gpu_kernel_bench"; then
  step gpu_kernel_bench "$(bin gpu_kernel_bench)"
  cat "$logs/gpu_kernel_bench.log"
fi
if $all && [ -d third_party/fla ] && time_left 90 "FLA prefill"; then
  step fla_prefill env -u LD_LIBRARY_PATH timeout 240 python3 bench/fla_prefill_bench.py \
    third_party
  cat "$logs/fla_prefill.log"
fi
if $all && [ -d third_party/performer_pytorch_root ] && time_left 90 "performer-pytorch"; then
  step performer_pytorch env -u LD_LIBRARY_PATH timeout 240 python3 \
    bench/performer_pytorch_bench.py third_party/performer_pytorch_root
  grep -v "^unable to import" "$logs/performer_pytorch.log"
fi
if $all && [ "$core" = ON ] && time_left 120 "all unit tests"; then
  gtest_until_done unit build-gpu/tests/performer_unit_tests
fi
if $all && time_left 30 "compute-sanitizer memcheck"; then
  step memcheck timeout 300 /usr/local/cuda/bin/compute-sanitizer --tool memcheck \
    --error-exitcode 1 build-gpu/tests/performer_cuda_tests --gtest_brief=1
  tail -3 "$logs/memcheck.log"
fi
finish
