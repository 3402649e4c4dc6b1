#include "kernels/cuda/causal_softmax_attention_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/causal_softmax_attention_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {

torch::Tensor CausalSoftmaxAttentionCuda(const torch::Tensor& queries, const torch::Tensor& keys,
                                         const torch::Tensor& values, const torch::Tensor& last,
                                         float temp) {
  torch::Tensor out = torch::empty(
      {queries.size(0), queries.size(1), queries.size(2), values.size(3)}, queries.options());
  CausalSoftmaxAttentionArgs a{};
  a.queries = queries.data_ptr<float>();
  a.keys = keys.data_ptr<float>();
  a.values = values.data_ptr<float>();
  a.last = last.data_ptr<int64_t>();
  a.out = out.data_ptr<float>();
  a.key_row = keys.stride(0);
  a.key_position = keys.stride(1);
  a.value_row = values.stride(0);
  a.value_position = values.stride(1);
  a.rows = queries.size(0);
  a.tokens = queries.size(1);
  a.heads = queries.size(2);
  a.e = queries.size(3);
  a.d = values.size(3);
  a.temp = temp;
  CheckLaunch(CausalSoftmaxAttentionForward(a, CurrentStream(queries)), "CausalSoftmaxAttention");
  return out;
}

}  // namespace performer::kernels::cuda
