#include "kernels/cuda/local_product_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/local_product_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {
namespace {

torch::ScalarType ComputeType(torch::ScalarType type) {
  return type == torch::kDouble ? torch::kDouble : torch::kFloat;
}

}  // namespace

torch::Tensor LocalDotProductCuda(const torch::Tensor& queries, const torch::Tensor& keys,
                                  const torch::Tensor& attn_mask_finite,
                                  const torch::Tensor& key_lengths, int64_t local_context) {
  TORCH_CHECK(queries.dim() == 4 && keys.dim() == 4,
              "LocalDotProduct: expected queries (N, H, L, E) and keys (N, H, S, E)");
  TORCH_CHECK(keys.size(0) == queries.size(0) && keys.size(1) == queries.size(1) &&
                  keys.size(3) == queries.size(3),
              "LocalDotProduct: keys must be (N, H, S, E) with the N, H, E of the queries");
  TORCH_CHECK(local_context > 0, "LocalDotProduct: local_context must be positive, got ",
              local_context);
  const int64_t N = queries.size(0), H = queries.size(1), L = queries.size(2);
  const int64_t S = keys.size(2), E = queries.size(3);
  TORCH_CHECK(key_lengths.dim() == 1 && key_lengths.size(0) == N,
              "LocalDotProduct: key_lengths must be a vector (N,)");
  TORCH_CHECK(
      attn_mask_finite.dim() == 2 && attn_mask_finite.size(0) == L && attn_mask_finite.size(1) == S,
      "LocalDotProduct: attn_mask_finite must be (L, S) = (", L, ", ", S, "), got ",
      attn_mask_finite.sizes());
  TORCH_CHECK(queries.is_floating_point() && keys.scalar_type() == queries.scalar_type(),
              "LocalDotProduct: queries and keys must share a floating dtype");
  const torch::ScalarType type = ComputeType(queries.scalar_type());
  const torch::Tensor q = queries.to(type).contiguous();
  const torch::Tensor k = keys.to(type).contiguous();
  const torch::Tensor mask = attn_mask_finite.to(type).contiguous();
  const torch::Tensor lengths = key_lengths.to(torch::kLong).contiguous();
  torch::Tensor scores = torch::empty({N, H, L, local_context}, q.options());
  const char* error = nullptr;
  if (type == torch::kDouble) {
    error = LocalDotProductForward<double>(q.data_ptr<double>(), k.data_ptr<double>(),
                                           mask.data_ptr<double>(), lengths.data_ptr<int64_t>(),
                                           scores.data_ptr<double>(), N * H, H, L, S, E,
                                           local_context, CurrentStream(q));
  } else {
    error = LocalDotProductForward<float>(q.data_ptr<float>(), k.data_ptr<float>(),
                                          mask.data_ptr<float>(), lengths.data_ptr<int64_t>(),
                                          scores.data_ptr<float>(), N * H, H, L, S, E,
                                          local_context, CurrentStream(q));
  }
  CheckLaunch(error, "LocalDotProduct");
  return scores.to(queries.scalar_type());
}

torch::Tensor LocalWeightedAverageCuda(const torch::Tensor& attention,
                                       const torch::Tensor& values) {
  TORCH_CHECK(attention.dim() == 4 && values.dim() == 4,
              "LocalWeightedAverage: expected attention (N, H, L, c) and values (N, H, S, D)");
  TORCH_CHECK(values.size(0) == attention.size(0) && values.size(1) == attention.size(1),
              "LocalWeightedAverage: attention and values must share N and H");
  TORCH_CHECK(attention.size(3) > 0, "LocalWeightedAverage: the local context must be positive");
  TORCH_CHECK(attention.is_floating_point() && values.scalar_type() == attention.scalar_type(),
              "LocalWeightedAverage: attention and values must share a floating dtype");
  const int64_t N = attention.size(0), H = attention.size(1), L = attention.size(2);
  const int64_t context = attention.size(3), S = values.size(2), D = values.size(3);
  const torch::ScalarType type = ComputeType(values.scalar_type());
  const torch::Tensor a = attention.to(type).contiguous();
  const torch::Tensor v = values.to(type).contiguous();
  torch::Tensor out = torch::empty({N, H, L, D}, v.options());
  const char* error = nullptr;
  if (type == torch::kDouble) {
    error = LocalWeightedAverageForward<double>(a.data_ptr<double>(), v.data_ptr<double>(),
                                                out.data_ptr<double>(), N * H, L, S, D, context,
                                                CurrentStream(v));
  } else {
    error = LocalWeightedAverageForward<float>(a.data_ptr<float>(), v.data_ptr<float>(),
                                               out.data_ptr<float>(), N * H, L, S, D, context,
                                               CurrentStream(v));
  }
  CheckLaunch(error, "LocalWeightedAverage");
  return out.to(values.scalar_type());
}

}  // namespace performer::kernels::cuda
