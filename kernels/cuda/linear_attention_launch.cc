#include "kernels/cuda/linear_attention_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/linear_attention_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {

torch::Tensor LinearAttentionCuda(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                                  const torch::Tensor& v, double eps) {
  TORCH_CHECK(phi_q.dim() == 4 && phi_k.dim() == 4 && v.dim() == 4,
              "LinearAttention: expected 4-D phi_q, phi_k and v");
  const torch::Tensor q = phi_q.to(torch::kFloat).contiguous();
  const torch::Tensor k = phi_k.to(torch::kFloat).contiguous();
  const torch::Tensor values = v.to(torch::kFloat).contiguous();
  const int64_t batch_heads = q.size(0) * q.size(1), features = q.size(3);
  const int64_t value_dims = values.size(3);
  torch::Tensor kv = torch::empty({batch_heads, features, value_dims + 1}, q.options());
  torch::Tensor out = torch::empty({q.size(0), q.size(1), q.size(2), value_dims}, q.options());
  CheckLaunch(LinearAttentionForwardCuda(
                  q.data_ptr<float>(), k.data_ptr<float>(), values.data_ptr<float>(),
                  kv.data_ptr<float>(), out.data_ptr<float>(), batch_heads, q.size(2), k.size(2),
                  features, value_dims, static_cast<float>(eps), CurrentStream(q)),
              "LinearAttention");
  return out.to(v.scalar_type());
}

}  // namespace performer::kernels::cuda
