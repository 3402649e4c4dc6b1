#include "kernels/cuda/causal_product_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/causal_product_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {

torch::Tensor CausalDotProductCuda(const torch::Tensor& queries, const torch::Tensor& keys,
                                   const torch::Tensor& values) {
  TORCH_CHECK(queries.dim() == 4 && keys.sizes() == queries.sizes() && values.dim() == 4 &&
                  values.size(0) == queries.size(0) && values.size(1) == queries.size(1) &&
                  values.size(2) == queries.size(2),
              "CausalDotProduct: expected Q, K (N,H,L,E) and V (N,H,L,M), got ", queries.sizes(),
              ", ", keys.sizes(), ", ", values.sizes());
  const torch::Tensor q = queries.to(torch::kFloat).contiguous();
  const torch::Tensor k = keys.to(torch::kFloat).contiguous();
  const torch::Tensor v = values.to(torch::kFloat).contiguous();
  torch::Tensor out = torch::empty(v.sizes(), v.options());
  const int64_t batch_heads = q.size(0) * q.size(1);
  CheckLaunch(CausalDotProductForward(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                                      out.data_ptr<float>(), batch_heads, q.size(2), q.size(3),
                                      v.size(3), CurrentStream(q)),
              "CausalDotProduct");
  return out.to(values.scalar_type());
}

}  // namespace performer::kernels::cuda
