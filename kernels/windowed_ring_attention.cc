#include "kernels/windowed_ring_attention.h"

#include <torch/torch.h>

#include "kernels/cpu/windowed_ring_attention_cpu.h"
#include "kernels/cuda_row_invariance.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/windowed_ring_attention_launch.h"
#endif

namespace performer::kernels {
namespace {

bool ContiguousFloat(const torch::Tensor& t) {
  return t.defined() && t.scalar_type() == torch::kFloat && t.is_contiguous();
}

}  // namespace

bool WindowedRingAttentionSupported(const torch::Tensor& ring_k, const torch::Tensor& ring_v) {
  if (!ContiguousFloat(ring_k) || !ContiguousFloat(ring_v) || ring_k.device() != ring_v.device()) {
    return false;
  }
  return RowInvariantOn(ring_k.device());
}

torch::Tensor WindowedRingAttention(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& start,
                                    const torch::Tensor& ring_k, const torch::Tensor& ring_v,
                                    const torch::Tensor& cos, const torch::Tensor& sin) {
  const char* op = "WindowedRingAttention";
  CheckKernelDevice(op, ring_k, {&q, &k, &v, &start, &ring_v, &cos, &sin}, /*cuda_kernel=*/true);
  TORCH_CHECK(WindowedRingAttentionSupported(ring_k, ring_v), op,
              ": rings must be contiguous float32 on the CPU (or on CUDA under "
              "kernels::CudaRowInvariance()), got ",
              ring_k.scalar_type(), " on ", ring_k.device());
  TORCH_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(), op,
              ": q, k and v must be one (C, T, H, d) shape, got ", q.sizes(), ", ", k.sizes(),
              " and ", v.sizes());
  const int64_t c = q.size(0), heads = q.size(2), d = q.size(3);
  TORCH_CHECK(ring_k.dim() == 4 && ring_k.size(0) == c && ring_k.size(1) == heads &&
                  ring_k.size(2) >= 2 && ring_k.size(2) % 2 == 0 && ring_k.size(3) == d &&
                  ring_v.sizes() == ring_k.sizes(),
              op, ": rings must be (C, H, 2w, d) = (", c, ", ", heads, ", 2w, ", d, "), got ",
              ring_k.sizes(), " and ", ring_v.sizes());
  const int64_t ring = ring_k.size(2);
  TORCH_CHECK(cos.sizes() == torch::IntArrayRef({ring, d}) && sin.sizes() == cos.sizes(), op,
              ": cos and sin must be (2w, d) = (", ring, ", ", d, "), got ", cos.sizes(), " and ",
              sin.sizes());
  TORCH_CHECK(start.dim() == 1 && start.size(0) == c, op, ": start must be (C,) = (", c, "), got ",
              start.sizes());
  const torch::Tensor qc = q.to(torch::kFloat).contiguous();
  const torch::Tensor kc = k.to(torch::kFloat).contiguous();
  const torch::Tensor vc = v.to(torch::kFloat).contiguous();
  const torch::Tensor first = start.to(torch::kLong).contiguous();
  const torch::Tensor cos32 = cos.to(torch::kFloat).contiguous();
  const torch::Tensor sin32 = sin.to(torch::kFloat).contiguous();
#if PERFORMER_CUDA_KERNELS
  if (ring_k.is_cuda()) {
    return cuda::WindowedRingAttentionCuda(qc, kc, vc, first, ring_k, ring_v, cos32, sin32);
  }
#endif
  return cpu::WindowedRingAttentionForward(qc, kc, vc, first, ring_k, ring_v, cos32, sin32);
}

}  // namespace performer::kernels
