#!/usr/bin/env bash
# Sanitizer builds and runs (docs/reliability.md, "Sanitizers"):
#
#   asan   AddressSanitizer + UndefinedBehaviorSanitizer (g++), build dir
#          build-asan: the `unit` suite and, with SANITIZE_INTEGRATION=1
#          (the default), the `integration` suite, whose performer-serve is
#          the instrumented one.
#   tsan   ThreadSanitizer (g++), build dir build-tsan: the engine's
#          GoogleTests (tests/server/engine: engine, scheduler, runner,
#          output, caches, sessions, from performer_server_tests). Not the
#          service tests: Debian's gRPC, absl and protobuf are not
#          instrumented, so TSan cannot see gRPC's own synchronization and
#          reports its threads' handovers as races (thousands per run).
#
# Usage: tools/sanitize.sh [asan|tsan|all] [extra ctest args]
#   JOBS=N               build and ctest parallelism (default 2)
#   SANITIZE_BUILD_ONLY=1 build, do not test
#   SANITIZE_INTEGRATION=0 asan: unit suite only (CI's budget)
# Any sanitizer report fails the test that produced it: recovery is off
# (-fno-sanitize-recover) and halt_on_error / exitcode are set below.
# Each run prints "sanitize: <mode> ... seconds" and ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-all}"
shift || true
JOBS="${JOBS:-2}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
# -g1 would otherwise put the working directory in ccache's hash, so that
# every fresh clone (CI's) rebuilt from nothing.
export CCACHE_NOHASHDIR=1
supp="$PWD/tools/sanitizers"

# Only what the suites run: no benchmarks, no CUDA, no parity binary.
configure() {  # build_dir flags
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPERFORMER_BUILD_BENCH=OFF -DPERFORMER_WITH_CUDA=OFF \
    "-DCMAKE_CXX_FLAGS=$2" \
    "-DCMAKE_EXE_LINKER_FLAGS=$2" "-DCMAKE_SHARED_LINKER_FLAGS=$2" >/dev/null
}

run_asan() {
  local dir="${ASAN_BUILD_DIR:-build-asan}" start
  start=$(date +%s)
  # -g1: line tables for readable reports at a small compile-time cost.
  # -Wno-maybe-uninitialized: under -fsanitize=address GCC 12 reports
  # std::variant members (ParamValue) as maybe-uninitialized, a known false
  # positive of the instrumented optimiser; the normal build keeps the
  # warning as an error.
  configure "$dir" "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g1 -Wno-maybe-uninitialized"
  local targets=(performer_unit_tests performer_server_tests performer_cuda_emulation_tests)
  if [ "${SANITIZE_INTEGRATION:-1}" = 1 ]; then
    targets+=(performer-serve performer-client performer-train performer-init-model
              performer_integration_python_stubs)
  fi
  cmake --build "$dir" -j "$JOBS" --target "${targets[@]}"
  echo "sanitize: asan build $(( $(date +%s) - start )) s"
  [ "${SANITIZE_BUILD_ONLY:-0}" = 1 ] && return 0
  start=$(date +%s)
  # detect_leaks: see tools/sanitizers/lsan.supp for the libraries' own
  # process-lifetime allocations that are suppressed.
  export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=66:strict_init_order=1:detect_stack_use_after_return=0"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
  local labels="unit"
  [ "${SANITIZE_INTEGRATION:-1}" = 1 ] && labels="unit|integration"
  # The suites' servers start slower instrumented.
  PERFORMER_STARTUP_TIMEOUT=300 ctest --test-dir "$dir" -L "$labels" -LE "cuda|deploy" \
    --output-on-failure -j "$JOBS" --timeout 1800 "$@" || status=$?
  echo "sanitize: asan tests $(( $(date +%s) - start )) s"
  return "${status:-0}"
}

run_tsan() {
  local dir="${TSAN_BUILD_DIR:-build-tsan}" start
  start=$(date +%s)
  configure "$dir" "-fsanitize=thread -fno-omit-frame-pointer -g1 -Wno-maybe-uninitialized"
  cmake --build "$dir" -j "$JOBS" --target performer_server_tests
  echo "sanitize: tsan build $(( $(date +%s) - start )) s"
  [ "${SANITIZE_BUILD_ONLY:-0}" = 1 ] && return 0
  start=$(date +%s)
  export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
  # One OpenMP thread: libgomp is not instrumented, so TSan cannot see the
  # barrier that ends a parallel region and would report every kernel's
  # writes from its team threads. The threads TSan is here for (the
  # engine's, the compute thread, the tests') are unaffected.
  export OMP_NUM_THREADS=1
  # The engine's tests (tests/server/engine).
  local filter="${TSAN_GTEST_FILTER:-Engine*:ModelRunner*:Scheduler*:OutputProcessor*:PrefixCache*:SessionStore*:StateReuse*:TextOutput*}"
  "$dir/tests/performer_server_tests" --gtest_filter="$filter-*CudaTest.*" "$@" || status=$?
  echo "sanitize: tsan tests $(( $(date +%s) - start )) s"
  return "${status:-0}"
}

case "$mode" in
  asan) run_asan "$@" ;;
  tsan) run_tsan "$@" ;;
  all) run_asan "$@"; run_tsan ;;
  *) echo "usage: $0 [asan|tsan|all] [ctest args]" >&2; exit 2 ;;
esac
