#include "kernels/cuda/clustering_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/clustering_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {

HashClusters ClusterHashesCuda(const torch::Tensor& hashes, const torch::Tensor& lengths,
                               const torch::Tensor& centroid_positions, int64_t iterations,
                               int64_t bits, const torch::Tensor& seeds) {
  TORCH_CHECK(hashes.dim() == 3 && hashes.scalar_type() == torch::kInt64,
              "ClusterHashes: hashes must be an int64 (N, H, L) tensor");
  const int64_t N = hashes.size(0), H = hashes.size(1), L = hashes.size(2);
  const int64_t C = centroid_positions.size(0);
  const torch::Tensor codes = hashes.contiguous();
  const torch::Tensor lengths64 = lengths.to(torch::kInt64).contiguous();
  const torch::Tensor positions = centroid_positions.to(torch::kInt64).contiguous();
  const torch::Tensor seeds64 = seeds.to(codes.device(), torch::kInt64).contiguous();
  TORCH_CHECK(lengths64.numel() == N && seeds64.numel() == N * H,
              "ClusterHashes: expected N lengths and N*H seeds");
  torch::Tensor groups = torch::empty({N, H, L}, codes.options());
  torch::Tensor counts = torch::empty({N, H, C}, codes.options());
  CheckLaunch(ClusterHashesForward(codes.data_ptr<int64_t>(), lengths64.data_ptr<int64_t>(),
                                   positions.data_ptr<int64_t>(), seeds64.data_ptr<int64_t>(),
                                   groups.data_ptr<int64_t>(), counts.data_ptr<int64_t>(), N * H, H,
                                   L, C, iterations, bits, CurrentStream(codes)),
              "ClusterHashes");
  return {groups, counts};
}

}  // namespace performer::kernels::cuda
