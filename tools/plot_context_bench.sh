#!/usr/bin/env bash
# Runs bench/context_bench and plots its results with gnuplot: decode
# tokens/s and memory per sequence vs context length, the Performer's
# recurrent state against a softmax KV cache (docs/context_bench.png, with
# the table in docs/context_bench.md).
#
#   bash tools/plot_context_bench.sh [context_bench flags...]
#
# Needs a built tree (BUILD_DIR, default build) and gnuplot (Debian
# gnuplot-nox; installed here when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
bench="${BUILD_DIR}/bench/context_bench"
if [ ! -x "${bench}" ]; then
  cmake --build "${BUILD_DIR}" --target context_bench
fi
if ! command -v gnuplot >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get install -y -qq --no-install-recommends gnuplot-nox
fi
data="docs/context_bench.dat"
"${bench}" --data_out="${data}" "$@" | tee docs/context_bench.md
gnuplot <<GNUPLOT
set terminal pngcairo size 1200,480 font "sans,11"
set output "docs/context_bench.png"
set multiplot layout 1,2 title "Decoding one sequence (batch 1, fp32, CPU): Performer state vs softmax KV cache"
set logscale x 2
set format x "%.0f"
set xlabel "context length (tokens)"
set grid
set key top right
set ylabel "decode tokens/s"
set yrange [0:*]
plot "${data}" using 1:2 with linespoints lw 2 pt 7 title "Performer (recurrent state)", \
     "${data}" using 1:3 with linespoints lw 2 pt 5 title "softmax (KV cache)"
set logscale y 2
set ylabel "memory per sequence (MiB)"
set yrange [*:*]
set key top left
plot "${data}" using 1:4 with linespoints lw 2 pt 7 title "Performer state", \
     "${data}" using 1:5 with linespoints lw 2 pt 5 title "softmax KV cache"
unset multiplot
GNUPLOT
echo "wrote docs/context_bench.png, docs/context_bench.md, ${data}"
