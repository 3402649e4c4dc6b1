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
  // glibc's malloc keeps buffers up to kHeapAllocationBytes on its heap
  // (see ConfigureTorchRuntime); false with another C library.
  bool large_buffers_from_heap = false;
};

// Tensor buffers up to this size are served from malloc's heap and reused
// once freed, instead of mapped and unmapped per allocation.
inline constexpr long kHeapAllocationBytes = 32L << 20;

// Sets the intra-op thread count (threads <= 0: the number of online CPUs)
// and inspects the mapped BLAS. Call once at start-up.
//
// Also raises glibc malloc's mmap threshold to kHeapAllocationBytes and its
// trim threshold above that. By default glibc maps every block above 128 KiB
// (a threshold it raises only as such blocks are freed) and gives the top of
// the heap back to the kernel past twice that, so the large temporaries of a
// forward (a prompt's attention state, 0.5 MiB per layer of the bench model;
// a prefix-cache snapshot, 3 MiB) were mapped, faulted in and zeroed by the
// kernel page by page on every call. Freed memory now stays in the process
// for the next call: the resident size follows the peak of the temporaries.
TorchRuntimeInfo ConfigureTorchRuntime(int threads);

// One line for the log, e.g. "LibTorch 1.13.1, 2 intra-op threads, BLAS
// /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 (optimized)".
std::string DescribeTorchRuntime(const TorchRuntimeInfo& info);

}  // namespace performer
