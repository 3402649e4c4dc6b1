#include "kernels/cuda/causal_product_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/causal_linear_prefill_launch.h"

namespace performer::kernels::cuda {

torch::Tensor CausalDotProductCuda(const torch::Tensor& queries, const torch::Tensor& keys,
                                   const torch::Tensor& values) {
  TORCH_CHECK(queries.dim() == 4 && keys.sizes() == queries.sizes() && values.dim() == 4 &&
                  values.size(0) == queries.size(0) && values.size(1) == queries.size(1) &&
                  values.size(2) == queries.size(2),
              "CausalDotProduct: expected Q, K (N,H,L,E) and V (N,H,L,M), got ", queries.sizes(),
              ", ", keys.sizes(), ", ", values.sizes());
  // float32 operands keep the reference's precision (the prefill runs
  // 16-bit inputs on tensor cores).
  const CausalLinearPrefillOutputs result = CausalLinearPrefillCuda(
      queries.to(torch::kFloat), keys.to(torch::kFloat), values.to(torch::kFloat), torch::Tensor());
  return result.out.to(values.scalar_type());
}

}  // namespace performer::kernels::cuda
