#include "kernels/causal_softmax_attention.h"

#include <torch/torch.h>

#include "kernels/cpu/causal_softmax_attention_cpu.h"
#include "kernels/cuda_row_invariance.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/causal_softmax_attention_launch.h"
#endif

namespace performer::kernels {
namespace {

// Float32 with its last two dimensions contiguous.
bool RowsOfKeys(const torch::Tensor& t) {
  return t.defined() && t.scalar_type() == torch::kFloat && t.dim() == 4 && t.stride(3) == 1 &&
         t.stride(2) == t.size(3);
}

}  // namespace

bool CausalSoftmaxAttentionSupported(const torch::Tensor& keys, const torch::Tensor& values) {
  return RowsOfKeys(keys) && RowsOfKeys(values) && keys.device() == values.device() &&
         RowInvariantOn(keys.device());
}

torch::Tensor CausalSoftmaxAttention(const torch::Tensor& queries, const torch::Tensor& keys,
                                     const torch::Tensor& values, const torch::Tensor& last,
                                     double temp) {
  const char* op = "CausalSoftmaxAttention";
  CheckKernelDevice(op, keys, {&queries, &values, &last}, /*cuda_kernel=*/true);
  TORCH_CHECK(CausalSoftmaxAttentionSupported(keys, values), op,
              ": keys and values must be float32 tensors (N, T, H, *) with their last two "
              "dimensions contiguous, on the CPU or on CUDA under kernels::CudaRowInvariance(), "
              "got ",
              keys.scalar_type(), " ", keys.sizes(), " and ", values.scalar_type(), " ",
              values.sizes(), " on ", keys.device());
  const int64_t rows = keys.size(0), positions = keys.size(1), heads = keys.size(2);
  TORCH_CHECK(values.size(0) == rows && values.size(1) == positions && values.size(2) == heads, op,
              ": values must be (N, T, H, D) = (", rows, ", ", positions, ", ", heads, ", D), got ",
              values.sizes());
  TORCH_CHECK(queries.dim() == 4 && queries.size(0) == rows && queries.size(2) == heads &&
                  queries.size(3) == keys.size(3),
              op, ": queries must be (N, n, H, E) = (", rows, ", n, ", heads, ", ", keys.size(3),
              "), got ", queries.sizes());
  TORCH_CHECK(last.dim() == 2 && last.size(0) == rows && last.size(1) == queries.size(1), op,
              ": last must be (N, n) = (", rows, ", ", queries.size(1), "), got ", last.sizes());
  const torch::Tensor visible = last.to(torch::kLong).contiguous();
  // On the CPU only: on CUDA the check would wait for the device at every
  // step (the slot state's own positions are in range there).
  if (visible.numel() > 0 && visible.is_cpu()) {
    const int64_t low = visible.min().item<int64_t>(), high = visible.max().item<int64_t>();
    TORCH_CHECK(low >= 0 && high < positions, op, ": last must lie in [0, ", positions,
                "), got values from ", low, " to ", high);
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor rows_of_queries = queries.to(torch::kFloat).contiguous();
#if PERFORMER_CUDA_KERNELS
  if (keys.is_cuda()) {
    return cuda::CausalSoftmaxAttentionCuda(rows_of_queries, keys, values, visible,
                                            static_cast<float>(temp));
  }
#endif
  return cpu::CausalSoftmaxAttentionForward(rows_of_queries, keys, values, visible,
                                            static_cast<float>(temp));
}

}  // namespace performer::kernels
