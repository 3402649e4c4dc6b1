#include "kernels/aggregate.h"

#include <torch/torch.h>

#include "kernels/cpu/aggregate_cpu.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/aggregate_launch.h"
#endif

namespace performer::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Checks shared by both directions; `rows` is X (N,H,L,E) for Aggregate and
// Y (N,H,C,E) for Broadcast.
void CheckArguments(const char* op, const torch::Tensor& rows, const torch::Tensor& groups,
                    const torch::Tensor& factors, bool rows_are_clusters) {
  TORCH_CHECK(rows.dim() == 4, op, ": expected a 4-D (N, H, ·, E) tensor, got ", rows.sizes());
  TORCH_CHECK(groups.dim() == 3 && groups.scalar_type() == torch::kInt64, op,
              ": groups must be an int64 (N, H, L) tensor");
  TORCH_CHECK(factors.dim() == 3, op, ": factors must be (N, H, C), got ", factors.sizes());
  TORCH_CHECK(groups.size(0) == rows.size(0) && groups.size(1) == rows.size(1) &&
                  factors.size(0) == rows.size(0) && factors.size(1) == rows.size(1),
              op, ": batch and head sizes of the inputs differ");
  if (rows_are_clusters) {
    TORCH_CHECK(factors.size(2) == rows.size(2), op, ": Y has ", rows.size(2),
                " clusters but factors has ", factors.size(2));
  } else {
    TORCH_CHECK(groups.size(2) == rows.size(2), op, ": X has ", rows.size(2),
                " rows but groups has ", groups.size(2));
  }
  TORCH_CHECK(rows.scalar_type() == torch::kFloat || rows.scalar_type() == torch::kDouble, op,
              ": expected float32 or float64, got ", rows.scalar_type());
  TORCH_CHECK(factors.scalar_type() == rows.scalar_type(), op,
              ": factors must have the dtype of the data");
  TORCH_CHECK(!factors.requires_grad(), op, ": factors are constants and cannot require grad");
  CheckKernelDevice(op, rows, {&groups, &factors}, /*cuda_kernel=*/true);
}

class AggregateFunction : public torch::autograd::Function<AggregateFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& groups, const torch::Tensor& factors) {
    ctx->save_for_backward({groups, factors});
    return cpu::AggregateCpu(x.contiguous(), groups, factors);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    torch::Tensor grad_x = cpu::BroadcastCpu(grad_outputs[0].contiguous(), saved[0], saved[1]);
    return {grad_x, torch::Tensor(), torch::Tensor()};
  }
};

class BroadcastFunction : public torch::autograd::Function<BroadcastFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& y,
                               const torch::Tensor& groups, const torch::Tensor& factors) {
    ctx->save_for_backward({groups, factors});
    return cpu::BroadcastCpu(y.contiguous(), groups, factors);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    torch::Tensor grad_y = cpu::AggregateCpu(grad_outputs[0].contiguous(), saved[0], saved[1]);
    return {grad_y, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor Aggregate(const torch::Tensor& x, const torch::Tensor& groups,
                        const torch::Tensor& factors) {
  CheckArguments("Aggregate", x, groups, factors, /*rows_are_clusters=*/false);
#if PERFORMER_CUDA_KERNELS
  if (x.is_cuda()) {
    // Inference only on CUDA: the backward pass (Broadcast) has a CPU kernel.
    CheckNoCudaGradients("Aggregate", {&x});
    return cuda::AggregateCuda(x, groups, factors);
  }
#endif
  return AggregateFunction::apply(x, groups.contiguous(), factors.contiguous());
}

torch::Tensor Broadcast(const torch::Tensor& y, const torch::Tensor& groups,
                        const torch::Tensor& factors) {
  CheckArguments("Broadcast", y, groups, factors, /*rows_are_clusters=*/true);
#if PERFORMER_CUDA_KERNELS
  if (y.is_cuda()) {
    CheckNoCudaGradients("Broadcast", {&y});
    return cuda::BroadcastCuda(y, groups, factors);
  }
#endif
  return BroadcastFunction::apply(y, groups.contiguous(), factors.contiguous());
}

}  // namespace performer::kernels
