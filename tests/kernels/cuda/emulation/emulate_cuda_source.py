#!/usr/bin/env python3
"""Rewrites a .cu file of kernels/cuda into C++ that runs on the host against
tests/kernels/cuda/emulation/cuda_emulation.h (see there what it models).

  emulate_cuda_source.py SOURCE.cu OUTPUT.cc

The rewrite keeps every line where it was (#line names the .cu, so errors and
debuggers point into it) and changes only what C++ cannot say:
  K<<<grid, block[, shared[, stream]]>>>(args)
      -> ::performer::cuda_emulation::Launch(K, grid, block, ...)(args)
      (LaunchCluster(dim3(x, y, z), K, ...) for a kernel declared with
      __cluster_dims__(x, y, z))
  extern __shared__ T name[];
      -> T* name = ::performer::cuda_emulation::DynamicShared<T>();
  __shared__ (a block's static shared array) -> static
  #pragma unroll -> (an empty line)
Namespace performer::kernels::cuda becomes performer::kernels::cuda_emulated
(a macro), so that the emulated kernels link beside the real ones, and
__CUDA_ARCH__ is 900, the device cuda_emulation.h reports.
"""
import re
import sys

LAUNCH_OPEN = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<")
CLUSTER_KERNEL = re.compile(r"__cluster_dims__\(([^)]*)\)\s*(\w+)\s*\(")
EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?((?:[\w:]+\s+)+?)(\w+)\s*\[\s*\]\s*;")


def rewrite(text):
    text = re.sub(r"^[ \t]*#pragma unroll.*$", "", text, flags=re.M)
    text = EXTERN_SHARED.sub(
        lambda m: "%s* %s = ::performer::cuda_emulation::DynamicShared<%s>();" %
        (m.group(1).strip(), m.group(2), m.group(1).strip()), text)
    text = re.sub(r"\b__shared__\b", "static", text)
    clusters = {m.group(2): m.group(1) for m in CLUSTER_KERNEL.finditer(text)}
    out, at = [], 0
    while True:
        match = LAUNCH_OPEN.search(text, at)
        if match is None:
            break
        close = text.find(">>>", match.end())
        if close < 0:
            raise SystemExit("unterminated <<< launch")
        config = text[match.end():close]
        out.append(text[at:match.start()])
        kernel = match.group(1)
        if kernel in clusters:
            out.append("::performer::cuda_emulation::LaunchCluster(dim3(%s), %s, %s)" %
                       (clusters[kernel], kernel, config))
        else:
            out.append("::performer::cuda_emulation::Launch(%s, %s)" % (kernel, config))
        at = close + 3
    out.append(text[at:])
    return "".join(out)


def main():
    source, output = sys.argv[1], sys.argv[2]
    with open(source, encoding="utf-8") as f:
        text = f.read()
    header = ('#include "tests/kernels/cuda/emulation/cuda_emulation.h"\n'
              "#define cuda cuda_emulated\n"
              "#define __CUDA_ARCH__ 900\n"
              '#line 1 "%s"\n' % source)
    with open(output, "w", encoding="utf-8") as f:
        f.write(header + rewrite(text))


if __name__ == "__main__":
    main()
