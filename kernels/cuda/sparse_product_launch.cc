#include "kernels/cuda/sparse_product_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/sparse_product_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {

torch::Tensor ClusteredSparseDotProductCuda(const torch::Tensor& queries, const torch::Tensor& keys,
                                            const torch::Tensor& topk,
                                            const torch::Tensor& groups) {
  const torch::Tensor q = queries.contiguous();
  const torch::Tensor k = keys.contiguous();
  const torch::Tensor t = topk.contiguous();
  const torch::Tensor g = groups.contiguous();
  const int64_t batch_heads = q.size(0) * q.size(1);
  const int64_t length = q.size(2), dims = q.size(3), key_count = k.size(2);
  const int64_t clusters = t.size(2), top = t.size(3);
  torch::Tensor out = torch::empty({q.size(0), q.size(1), length, top}, q.options());
  const char* error =
      DispatchFloatOrDouble("ClusteredSparseDotProduct", q.scalar_type(), [&](auto zero) {
        using T = decltype(zero);
        return ClusteredSparseDotProductForward<T>(
            q.data_ptr<T>(), k.data_ptr<T>(), t.data_ptr<int64_t>(), g.data_ptr<int64_t>(),
            out.data_ptr<T>(), batch_heads, length, key_count, clusters, top, dims,
            CurrentStream(q));
      });
  CheckLaunch(error, "ClusteredSparseDotProduct");
  return out;
}

torch::Tensor ClusteredSparseWeightedAverageCuda(const torch::Tensor& weights,
                                                 const torch::Tensor& values,
                                                 const torch::Tensor& topk,
                                                 const torch::Tensor& groups) {
  const torch::Tensor w = weights.contiguous();
  const torch::Tensor v = values.contiguous();
  const torch::Tensor t = topk.contiguous();
  const torch::Tensor g = groups.contiguous();
  const int64_t batch_heads = v.size(0) * v.size(1);
  const int64_t length = w.size(2), dims = v.size(3), key_count = v.size(2);
  const int64_t clusters = t.size(2), top = t.size(3);
  torch::Tensor out = torch::empty({v.size(0), v.size(1), length, dims}, v.options());
  const char* error =
      DispatchFloatOrDouble("ClusteredSparseWeightedAverage", v.scalar_type(), [&](auto zero) {
        using T = decltype(zero);
        return ClusteredSparseWeightedAverageForward<T>(
            w.data_ptr<T>(), v.data_ptr<T>(), t.data_ptr<int64_t>(), g.data_ptr<int64_t>(),
            out.data_ptr<T>(), batch_heads, length, key_count, clusters, top, dims,
            CurrentStream(v));
      });
  CheckLaunch(error, "ClusteredSparseWeightedAverage");
  return out;
}

}  // namespace performer::kernels::cuda
