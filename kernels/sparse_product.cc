#include "kernels/sparse_product.h"

#include <torch/torch.h>

#include "kernels/cpu/sparse_product_cpu.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/sparse_product_launch.h"
#endif

namespace performer::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// `rows` is Q (N,H,L,E) or W (N,H,L,k); `table` is K (N,H,S,E) or V (N,H,S,D).
void CheckArguments(const char* op, const torch::Tensor& rows, const torch::Tensor& table,
                    const torch::Tensor& topk, const torch::Tensor& groups) {
  TORCH_CHECK(rows.dim() == 4 && table.dim() == 4, op, ": expected 4-D (N, H, ·, ·) tensors, got ",
              rows.sizes(), " and ", table.sizes());
  TORCH_CHECK(topk.dim() == 4 && topk.scalar_type() == torch::kInt64, op,
              ": topk must be an int64 (N, H, C, k) tensor");
  TORCH_CHECK(groups.dim() == 3 && groups.scalar_type() == torch::kInt64, op,
              ": groups must be an int64 (N, H, L) tensor");
  const int64_t batch = rows.size(0);
  const int64_t heads = rows.size(1);
  TORCH_CHECK(table.size(0) == batch && topk.size(0) == batch && groups.size(0) == batch &&
                  table.size(1) == heads && topk.size(1) == heads && groups.size(1) == heads,
              op, ": batch and head sizes of the inputs differ");
  TORCH_CHECK(groups.size(2) == rows.size(2), op, ": ", rows.size(2), " query rows but groups has ",
              groups.size(2));
  TORCH_CHECK(rows.scalar_type() == table.scalar_type(), op, ": inputs must share a dtype");
  TORCH_CHECK(rows.scalar_type() == torch::kFloat || rows.scalar_type() == torch::kDouble, op,
              ": expected float32 or float64, got ", rows.scalar_type());
  CheckKernelDevice(op, rows, {&table, &topk, &groups}, /*cuda_kernel=*/true);
  // One host read whatever the device (a single synchronisation on CUDA): the
  // kernels index keys and values with these entries unchecked.
  if (topk.numel() > 0) {
    TORCH_CHECK(!topk.lt(0).logical_or(topk.ge(table.size(2))).any().item<bool>(), op,
                ": topk indices must lie in [0, S = ", table.size(2), ")");
  }
}

class ClusteredSparseDotProductFunction
    : public torch::autograd::Function<ClusteredSparseDotProductFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& queries,
                               const torch::Tensor& keys, const torch::Tensor& topk,
                               const torch::Tensor& groups) {
    torch::Tensor q = queries.contiguous();
    torch::Tensor k = keys.contiguous();
    ctx->save_for_backward({q, k, topk, groups});
    return cpu::ClusteredSparseDotProductCpu(q, k, topk, groups);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto [grad_q, grad_k] = cpu::ClusteredSparseDotProductBackwardCpu(
        grad_outputs[0].contiguous(), saved[0], saved[1], saved[2], saved[3],
        ctx->needs_input_grad(0), ctx->needs_input_grad(1));
    return {grad_q, grad_k, torch::Tensor(), torch::Tensor()};
  }
};

class ClusteredSparseWeightedAverageFunction
    : public torch::autograd::Function<ClusteredSparseWeightedAverageFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& weights,
                               const torch::Tensor& values, const torch::Tensor& topk,
                               const torch::Tensor& groups) {
    torch::Tensor w = weights.contiguous();
    torch::Tensor v = values.contiguous();
    ctx->save_for_backward({w, v, topk, groups});
    return cpu::ClusteredSparseWeightedAverageCpu(w, v, topk, groups);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto [grad_w, grad_v] = cpu::ClusteredSparseWeightedAverageBackwardCpu(
        grad_outputs[0].contiguous(), saved[0], saved[1], saved[2], saved[3],
        ctx->needs_input_grad(0), ctx->needs_input_grad(1));
    return {grad_w, grad_v, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ClusteredSparseDotProduct(const torch::Tensor& queries, const torch::Tensor& keys,
                                        const torch::Tensor& topk, const torch::Tensor& groups) {
  CheckArguments("ClusteredSparseDotProduct", queries, keys, topk, groups);
  TORCH_CHECK(queries.size(3) == keys.size(3),
              "ClusteredSparseDotProduct: queries and keys must have the same size E, got ",
              queries.size(3), " and ", keys.size(3));
#if PERFORMER_CUDA_KERNELS
  if (queries.is_cuda()) {
    // Inference only on CUDA: the backward pass has a CPU kernel alone.
    CheckNoCudaGradients("ClusteredSparseDotProduct", {&queries, &keys});
    return cuda::ClusteredSparseDotProductCuda(queries, keys, topk, groups);
  }
#endif
  return ClusteredSparseDotProductFunction::apply(queries, keys, topk.contiguous(),
                                                  groups.contiguous());
}

torch::Tensor ClusteredSparseWeightedAverage(const torch::Tensor& weights,
                                             const torch::Tensor& values, const torch::Tensor& topk,
                                             const torch::Tensor& groups) {
  CheckArguments("ClusteredSparseWeightedAverage", weights, values, topk, groups);
  TORCH_CHECK(weights.size(3) == topk.size(3), "ClusteredSparseWeightedAverage: weights have ",
              weights.size(3), " columns but the top-k lists have ", topk.size(3));
#if PERFORMER_CUDA_KERNELS
  if (weights.is_cuda()) {
    CheckNoCudaGradients("ClusteredSparseWeightedAverage", {&weights, &values});
    return cuda::ClusteredSparseWeightedAverageCuda(weights, values, topk, groups);
  }
#endif
  return ClusteredSparseWeightedAverageFunction::apply(weights, values, topk.contiguous(),
                                                       groups.contiguous());
}

}  // namespace performer::kernels
