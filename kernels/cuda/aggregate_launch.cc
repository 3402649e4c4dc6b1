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
  const char* error = DispatchFloatOrDouble("Aggregate", xs.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    return AggregateForward<T>(xs.data_ptr<T>(), g.data_ptr<int64_t>(), f.data_ptr<T>(),
                               y.data_ptr<T>(), batch_heads, length, clusters, dims,
                               CurrentStream(xs));
  });
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
  const char* error = DispatchFloatOrDouble("Broadcast", ys.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    return BroadcastForward<T>(ys.data_ptr<T>(), g.data_ptr<int64_t>(), f.data_ptr<T>(),
                               x.data_ptr<T>(), batch_heads, length, clusters, dims,
                               CurrentStream(ys));
  });
  CheckLaunch(error, "Broadcast");
  return x;
}

}  // namespace performer::kernels::cuda
