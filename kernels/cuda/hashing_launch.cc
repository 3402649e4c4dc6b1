#include "kernels/cuda/hashing_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/hashing_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {

torch::Tensor ComputeHashesCuda(const torch::Tensor& x, const torch::Tensor& planes) {
  TORCH_CHECK(x.dim() == 2 && planes.dim() == 2 && planes.size(1) == x.size(1) + 1,
              "ComputeHashes: expected X (rows, E) and planes (bits, E + 1), got ", x.sizes(),
              " and ", planes.sizes());
  TORCH_CHECK(x.scalar_type() == planes.scalar_type(),
              "ComputeHashes: X and planes must share a dtype");
  const torch::Tensor xs = x.contiguous();
  const torch::Tensor ps = planes.contiguous();
  torch::Tensor codes = torch::empty({xs.size(0)}, xs.options().dtype(torch::kInt64));
  const char* error = nullptr;
  if (xs.scalar_type() == torch::kDouble) {
    error = ComputeHashesForward<double>(xs.data_ptr<double>(), ps.data_ptr<double>(),
                                         codes.data_ptr<int64_t>(), xs.size(0), xs.size(1),
                                         ps.size(0), CurrentStream(xs));
  } else {
    TORCH_CHECK(xs.scalar_type() == torch::kFloat,
                "ComputeHashes: expected float32 or float64 inputs, got ", xs.scalar_type());
    error = ComputeHashesForward<float>(xs.data_ptr<float>(), ps.data_ptr<float>(),
                                        codes.data_ptr<int64_t>(), xs.size(0), xs.size(1),
                                        ps.size(0), CurrentStream(xs));
  }
  CheckLaunch(error, "ComputeHashes");
  return codes;
}

}  // namespace performer::kernels::cuda
