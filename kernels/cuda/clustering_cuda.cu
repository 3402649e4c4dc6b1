#include <cuda_runtime.h>

#include <climits>
#include <cstddef>

#include "kernels/cuda/clustering_cuda.h"
#include "kernels/cuda/launch_status.cuh"
#include "kernels/cuda/mt19937_64.h"

namespace performer::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__host__ __device__ constexpr size_t Align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// Byte offsets of one block's shared memory.
struct Layout {
  size_t rng = 0, centroids = 0, members = 0, ones = 0, total = 0;
};

__host__ __device__ Layout MakeLayout(int clusters, int bits) {
  Layout s;
  size_t off = 0;
  s.rng = off;
  off += Align16(sizeof(Mt19937_64));
  s.centroids = off;
  off += Align16(sizeof(uint64_t) * clusters);
  s.members = off;
  off += Align16(sizeof(int) * clusters);
  s.ones = off;
  off += Align16(sizeof(int) * static_cast<size_t>(clusters) * bits);
  s.total = off;
  return s;
}

// The nearest centroid of `code` (lowest index among ties), as the CPU.
__device__ __forceinline__ int Nearest(uint64_t code, const uint64_t* centroids, int clusters) {
  int best_distance = 65;
  int best = 0;
  for (int c = 0; c < clusters; ++c) {
    const int d = __popcll(code ^ centroids[c]);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

__global__ void __launch_bounds__(kThreads)
    ClusterHashesKernel(const int64_t* __restrict__ hashes, const int64_t* __restrict__ lengths,
                        const int64_t* __restrict__ positions, const int64_t* __restrict__ seeds,
                        int64_t* __restrict__ groups, int64_t* __restrict__ counts, int64_t heads,
                        int64_t length, int clusters, int64_t iterations, int bits) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const Layout layout = MakeLayout(clusters, bits);
  Mt19937_64* rng = reinterpret_cast<Mt19937_64*>(smem_bytes + layout.rng);
  uint64_t* centroids = reinterpret_cast<uint64_t*>(smem_bytes + layout.centroids);
  int* members = reinterpret_cast<int*>(smem_bytes + layout.members);
  int* ones = reinterpret_cast<int*>(smem_bytes + layout.ones);  // (clusters, bits)

  const int64_t b = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t valid = lengths[b / heads];
  const uint64_t* codes = reinterpret_cast<const uint64_t*>(hashes) + b * length;
  int64_t* group = groups + b * length;
  const uint64_t value_mask = (uint64_t{1} << bits) - 1;
  bool rng_seeded = false;  // thread 0 only: seeded on the first empty cluster

  for (int c = tid; c < clusters; c += kThreads) centroids[c] = codes[positions[c]];
  __syncthreads();

  for (int64_t iteration = 1; iteration < iterations; ++iteration) {
    for (int c = tid; c < clusters; c += kThreads) members[c] = 0;
    for (int i = tid; i < clusters * bits; i += kThreads) ones[i] = 0;
    __syncthreads();
    for (int64_t l = tid; l < valid; l += kThreads) {
      const uint64_t code = codes[l];
      const int c = Nearest(code, centroids, clusters);
      atomicAdd(&members[c], 1);
      int* row = ones + c * bits;
      for (int bit = 0; bit < bits; ++bit) {
        if ((code >> bit) & 1ULL) atomicAdd(&row[bit], 1);
      }
    }
    __syncthreads();
    // Majority vote per non-empty cluster (threads split the clusters) ...
    for (int c = tid; c < clusters; c += kThreads) {
      const int count = members[c];
      if (count == 0) continue;
      const int* row = ones + c * bits;
      uint64_t centroid = 0;
      for (int bit = 0; bit < bits; ++bit) {
        // set - unset > 0
        if (2 * row[bit] - count > 0) centroid |= uint64_t{1} << bit;
      }
      centroids[c] = centroid;
    }
    // ... and the empty ones draw, in cluster order, from the CPU's stream.
    if (tid == 0) {
      for (int c = 0; c < clusters; ++c) {
        if (members[c] != 0) continue;
        if (!rng_seeded) {
          rng->Seed(static_cast<uint64_t>(seeds[b]));
          rng_seeded = true;
        }
        centroids[c] = rng->Next() & value_mask;
      }
    }
    __syncthreads();
  }

  for (int c = tid; c < clusters; c += kThreads) members[c] = 0;
  __syncthreads();
  for (int64_t l = tid; l < length; l += kThreads) {
    if (l < valid) {
      const int c = Nearest(codes[l], centroids, clusters);
      group[l] = c;
      atomicAdd(&members[c], 1);
    } else {
      group[l] = clusters + 1;
    }
  }
  __syncthreads();
  for (int c = tid; c < clusters; c += kThreads) counts[b * clusters + c] = members[c];
}

}  // namespace

const char* ClusterHashesForward(const int64_t* hashes, const int64_t* lengths,
                                 const int64_t* centroid_positions, const int64_t* seeds,
                                 int64_t* groups, int64_t* counts, int64_t batch_heads,
                                 int64_t heads, int64_t length, int64_t clusters,
                                 int64_t iterations, int64_t bits, void* stream) {
  if (bits < 1 || bits > 63) return "bits must be in [1, 63]";
  if (clusters < 1 || clusters > (1 << 20)) return "the number of clusters must be in [1, 2^20]";
  if (heads <= 0) return "heads must be positive";
  if (batch_heads == 0) return nullptr;
  if (batch_heads > INT_MAX) return "too many sequences for one grid";
  if (length > INT_MAX) return "L too large";
  const size_t shared_bytes = MakeLayout(static_cast<int>(clusters), static_cast<int>(bits)).total;
  int device = 0, max_smem = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  }
  if (err != cudaSuccess) return cudaGetErrorString(err);
  if (shared_bytes > static_cast<size_t>(max_smem)) {
    return "too many clusters x bits for the shared memory of one block";
  }
  err = cudaFuncSetAttribute(ClusterHashesKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared_bytes));
  if (err != cudaSuccess) return cudaGetErrorString(err);
  ClusterHashesKernel<<<static_cast<unsigned>(batch_heads), kThreads, shared_bytes,
                        static_cast<cudaStream_t>(stream)>>>(
      hashes, lengths, centroid_positions, seeds, groups, counts, heads, length,
      static_cast<int>(clusters), iterations, static_cast<int>(bits));
  return LaunchError();
}

}  // namespace performer::kernels::cuda
