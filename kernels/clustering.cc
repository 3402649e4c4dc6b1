#include "kernels/clustering.h"

#include <torch/torch.h>

#include "kernels/cpu/clustering_cpu.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/clustering_launch.h"
#endif

namespace performer::kernels {

HashClusters ClusterHashes(const torch::Tensor& hashes, const torch::Tensor& lengths,
                           const torch::Tensor& centroid_positions, int64_t iterations,
                           int64_t bits, c10::optional<at::Generator> generator) {
  TORCH_CHECK(hashes.dim() == 3 && hashes.scalar_type() == torch::kInt64,
              "ClusterHashes: hashes must be an int64 (N, H, L) tensor, got ", hashes.scalar_type(),
              " ", hashes.sizes());
  const int64_t batch = hashes.size(0);
  const int64_t length = hashes.size(2);
  TORCH_CHECK(lengths.dim() == 1 && lengths.size(0) == batch,
              "ClusterHashes: lengths must be a (N,) vector with N = ", batch, ", got ",
              lengths.sizes());
  TORCH_CHECK(!lengths.is_floating_point() && !lengths.is_complex(),
              "ClusterHashes: lengths must be integers");
  TORCH_CHECK(centroid_positions.dim() == 1 && centroid_positions.size(0) >= 1,
              "ClusterHashes: centroid_positions must be a non-empty (C,) vector");
  TORCH_CHECK(centroid_positions.scalar_type() == torch::kInt64,
              "ClusterHashes: centroid_positions must be int64");
  TORCH_CHECK(bits >= 1 && bits <= 63, "ClusterHashes: bits must be in [1, 63], got ", bits);
  TORCH_CHECK(iterations >= 0, "ClusterHashes: iterations must be >= 0, got ", iterations);
  CheckKernelDevice("ClusterHashes", hashes, {&lengths, &centroid_positions},
                    /*cuda_kernel=*/hashes.is_cuda());

  torch::Tensor lengths64 = lengths.to(torch::kInt64).contiguous();
  if (batch > 0) {
    TORCH_CHECK(lengths64.min().item<int64_t>() >= 0 && lengths64.max().item<int64_t>() <= length,
                "ClusterHashes: lengths must lie in [0, L = ", length, "]");
  }
  torch::Tensor positions = centroid_positions.contiguous();
  TORCH_CHECK(length > 0 && positions.min().item<int64_t>() >= 0 &&
                  positions.max().item<int64_t>() < length,
              "ClusterHashes: centroid positions must lie in [0, L = ", length, ")");

  // Seeds are drawn serially so that the result does not depend on threads.
  // On the CPU whatever the device of the codes, so that CPU and CUDA draw
  // the same seeds from the same generator state and give the same clusters.
  torch::Tensor seeds = torch::randint(int64_t{1} << 62, {batch * hashes.size(1)}, generator,
                                       torch::TensorOptions().dtype(torch::kInt64));
#if PERFORMER_CUDA_KERNELS
  if (hashes.is_cuda()) {
    return cuda::ClusterHashesCuda(hashes, lengths64, positions, iterations, bits, seeds);
  }
#endif
  return cpu::ClusterHashesCpu(hashes.contiguous(), lengths64, positions, iterations, bits, seeds);
}

}  // namespace performer::kernels
