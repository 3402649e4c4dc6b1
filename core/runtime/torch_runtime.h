// Process-wide LibTorch set-up: intra-op thread count and the BLAS in use.
//
// Debian's LibTorch does its matrix products through the system BLAS; with
// the reference BLAS a 2048^2 sgemm runs ~25x slower than with OpenBLAS, so
// the programs log which one the dynamic linker picked. LibTorch's intra-op
// pool defaults to one thread on some machines, so the count is set
// explicitly.
#pragma once

#include <string>

namespace performer {

struct TorchRuntimeInfo {
  int intra_op_threads = 1;
  std::string blas_library;        // Path of the BLAS shared object mapped, or "unknown".
  bool blas_is_optimized = false;  // OpenBLAS / MKL / BLIS rather than the reference BLAS.
};

// Sets the intra-op thread count (threads <= 0: the number of online CPUs)
// and inspects the mapped BLAS. Call once at start-up.
TorchRuntimeInfo ConfigureTorchRuntime(int threads);

// One line for the log, e.g. "LibTorch 1.13.1, 2 intra-op threads, BLAS
// /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 (optimized)".
std::string DescribeTorchRuntime(const TorchRuntimeInfo& info);

}  // namespace performer
