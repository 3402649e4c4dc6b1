#include "kernels/cuda/windowed_ring_attention_launch.h"

#include <torch/torch.h>

#include <cmath>

#include "kernels/cuda/torch_cuda.h"
#include "kernels/cuda/windowed_ring_attention_cuda.h"

namespace performer::kernels::cuda {

torch::Tensor WindowedRingAttentionCuda(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& start,
                                        const torch::Tensor& ring_k, const torch::Tensor& ring_v,
                                        const torch::Tensor& cos, const torch::Tensor& sin) {
  torch::Tensor out = torch::empty_like(q);
  WindowedRingAttentionArgs a{};
  a.q = q.data_ptr<float>();
  a.k = k.data_ptr<float>();
  a.v = v.data_ptr<float>();
  a.start = start.data_ptr<int64_t>();
  a.ring_k = ring_k.data_ptr<float>();
  a.ring_v = ring_v.data_ptr<float>();
  a.cos = cos.data_ptr<float>();
  a.sin = sin.data_ptr<float>();
  a.out = out.data_ptr<float>();
  a.sequences = q.size(0);
  a.tokens = q.size(1);
  a.heads = q.size(2);
  a.d = q.size(3);
  a.w = ring_k.size(2) / 2;
  a.query_scale = 1.0f / std::sqrt(static_cast<float>(a.d));
  CheckLaunch(WindowedRingAttentionForward(a, CurrentStream(q)), "WindowedRingAttention");
  return out;
}

}  // namespace performer::kernels::cuda
