#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang in their own build
# directory and runs each from its committed seed corpus
# (tests/fuzz/<target>/corpus; new inputs go to <build>/corpus/<target>,
# never into the checkout). A crash stops that target, leaves its input in
# <build>/crashes/<target>/ and makes the script exit 1 after the others
# have run.
#
# Usage: tools/fuzz.sh [seconds per target, default 60] [target...]
#        tools/fuzz.sh --ci [target...]
#   --ci: a fixed seed and a fixed number of runs per target (about 60 s
#   each on 2 cores), from the committed seeds only, so that a run depends
#   neither on the machine's speed nor on earlier runs' finds: what CI
#   runs. The timed form explores anew on every run (and keeps what it
#   found in <build>/corpus).
#   FUZZ_BUILD_DIR (default build-fuzz), JOBS (default 2), CXX (default clang++-14)
# Prints one line per target: runs, seconds, executions per second, corpus
# size, crashes (docs/reliability.md, "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")/.."
ci=0
if [ "${1:-}" = "--ci" ]; then
  ci=1
  shift
else
  seconds="${1:-60}"
  shift || true
fi
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors model_config generation_config tokenizer request_validation
                                       openai_request)
# --ci: runs per target, about 60 s each on the 2-core machines CI uses.
declare -A ci_runs=([safetensors]=200000 [model_config]=1200000 [generation_config]=200000
                    [tokenizer]=400000 [request_validation]=5000000
                    [openai_request]=1500000)
dir="${FUZZ_BUILD_DIR:-build-fuzz}"
JOBS="${JOBS:-2}"
bash tools/install_deps.sh --fuzz >/dev/null
cxx="${CXX:-$(command -v clang++-14 || command -v clang++)}"
if ! find /usr/lib/llvm-*/lib/clang -name 'libclang_rt.fuzzer-x86_64.a' 2>/dev/null | grep -q .; then
  echo "fuzz: libFuzzer runtime missing: apt-get install -y libclang-rt-14-dev" >&2
  exit 2
fi
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
# -g would otherwise put the working directory in ccache's hash.
export CCACHE_NOHASHDIR=1
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
  -DPERFORMER_FUZZ=ON -DPERFORMER_WITH_CUDA=OFF >/dev/null
cmake --build "$dir" -j "$JOBS" --target "${targets[@]/%/_fuzzer}"
status=0
for t in "${targets[@]}"; do
  corpus="$dir/corpus/$t"
  crashes="$dir/crashes/$t"
  if [ "$ci" = 1 ]; then
    corpus="$dir/corpus-ci/$t"
    rm -rf "$corpus"
    limit=(-seed=1 -runs="${ci_runs[$t]}")
  else
    limit=(-max_total_time="$seconds")
  fi
  mkdir -p "$corpus" "$crashes"
  log="$dir/$t.log"
  # The ASan and UBSan reports are what a crash is; leaks are checked too.
  # -rss_limit_mb: the readers bound what they allocate, far below this.
  if ASAN_OPTIONS="detect_leaks=1:halt_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
      "$dir/tests/fuzz/${t}_fuzzer" "${limit[@]}" -rss_limit_mb=4096 \
      -timeout=10 -artifact_prefix="$crashes/" -print_final_stats=1 \
      "$corpus" "tests/fuzz/$t/corpus" >"$log" 2>&1; then
    result="ok"
  else
    result="CRASH (see $log, input in $crashes/)"
    status=1
  fi
  runs=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1 | grep -Eo '[0-9]+' | head -1 || true)
  secs=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1 | grep -Eo '[0-9]+' | tail -1 || true)
  execs=$(grep -Eo 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || true)
  echo "fuzz: $t: ${runs:-?} runs in ${secs:-?} s (${execs:-?} exec/s), corpus $(ls "$corpus" | wc -l) + $(ls "tests/fuzz/$t/corpus" | wc -l) seeds: $result"
done
exit "$status"
