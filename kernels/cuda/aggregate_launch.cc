#include "kernels/cuda/aggregate_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/aggregate_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {

torch::Tensor AggregateCuda(const torch::Tensor& x, const torch::Tensor& groups,
                            const torch::Tensor& factors) {
  const torch::Tensor xs = x.contiguous();
  const torch::Tensor g = groups.contiguous();
  const torch::Tensor f = factors.contiguous();
  const int64_t batch_heads = x.size(0) * x.size(1);
  const int64_t length = x.size(2), dims = x.size(3), clusters = factors.size(2);
  torch::Tensor y = torch::empty({x.size(0), x.size(1), clusters, dims}, xs.options());
  const char* error = nullptr;
  if (xs.scalar_type() == torch::kDouble) {
    error = AggregateForward<double>(xs.data_ptr<double>(), g.data_ptr<int64_t>(),
                                     f.data_ptr<double>(), y.data_ptr<double>(), batch_heads,
                                     length, clusters, dims, CurrentStream(xs));
  } else {
    TORCH_CHECK(xs.scalar_type() == torch::kFloat, "Aggregate: CUDA takes float32 or float64");
    error = AggregateForward<float>(xs.data_ptr<float>(), g.data_ptr<int64_t>(),
                                    f.data_ptr<float>(), y.data_ptr<float>(), batch_heads, length,
                                    clusters, dims, CurrentStream(xs));
  }
  CheckLaunch(error, "Aggregate");
  return y;
}

torch::Tensor BroadcastCuda(const torch::Tensor& y, const torch::Tensor& groups,
                            const torch::Tensor& factors) {
  const torch::Tensor ys = y.contiguous();
  const torch::Tensor g = groups.contiguous();
  const torch::Tensor f = factors.contiguous();
  const int64_t batch_heads = y.size(0) * y.size(1);
  const int64_t clusters = y.size(2), dims = y.size(3), length = groups.size(2);
  torch::Tensor x = torch::empty({y.size(0), y.size(1), length, dims}, ys.options());
  const char* error = nullptr;
  if (ys.scalar_type() == torch::kDouble) {
    error = BroadcastForward<double>(ys.data_ptr<double>(), g.data_ptr<int64_t>(),
                                     f.data_ptr<double>(), x.data_ptr<double>(), batch_heads,
                                     length, clusters, dims, CurrentStream(ys));
  } else {
    TORCH_CHECK(ys.scalar_type() == torch::kFloat, "Broadcast: CUDA takes float32 or float64");
    error = BroadcastForward<float>(ys.data_ptr<float>(), g.data_ptr<int64_t>(),
                                    f.data_ptr<float>(), x.data_ptr<float>(), batch_heads, length,
                                    clusters, dims, CurrentStream(ys));
  }
  CheckLaunch(error, "Broadcast");
  return x;
}

}  // namespace performer::kernels::cuda
