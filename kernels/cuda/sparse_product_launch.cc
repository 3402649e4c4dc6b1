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
  const char* error = nullptr;
  if (q.scalar_type() == torch::kDouble) {
    error = ClusteredSparseDotProductForward<double>(
        q.data_ptr<double>(), k.data_ptr<double>(), t.data_ptr<int64_t>(), g.data_ptr<int64_t>(),
        out.data_ptr<double>(), batch_heads, length, key_count, clusters, top, dims,
        CurrentStream(q));
  } else {
    TORCH_CHECK(q.scalar_type() == torch::kFloat,
                "ClusteredSparseDotProduct: CUDA takes float32 or float64");
    error = ClusteredSparseDotProductForward<float>(
        q.data_ptr<float>(), k.data_ptr<float>(), t.data_ptr<int64_t>(), g.data_ptr<int64_t>(),
        out.data_ptr<float>(), batch_heads, length, key_count, clusters, top, dims,
        CurrentStream(q));
  }
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
  const char* error = nullptr;
  if (v.scalar_type() == torch::kDouble) {
    error = ClusteredSparseWeightedAverageForward<double>(
        w.data_ptr<double>(), v.data_ptr<double>(), t.data_ptr<int64_t>(), g.data_ptr<int64_t>(),
        out.data_ptr<double>(), batch_heads, length, key_count, clusters, top, dims,
        CurrentStream(v));
  } else {
    TORCH_CHECK(v.scalar_type() == torch::kFloat,
                "ClusteredSparseWeightedAverage: CUDA takes float32 or float64");
    error = ClusteredSparseWeightedAverageForward<float>(
        w.data_ptr<float>(), v.data_ptr<float>(), t.data_ptr<int64_t>(), g.data_ptr<int64_t>(),
        out.data_ptr<float>(), batch_heads, length, key_count, clusters, top, dims,
        CurrentStream(v));
  }
  CheckLaunch(error, "ClusteredSparseWeightedAverage");
  return out;
}

}  // namespace performer::kernels::cuda
