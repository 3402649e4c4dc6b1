#include "kernels/fused_linear.h"

#include <torch/torch.h>

#include <atomic>

#include "kernels/cpu/fused_linear_cpu.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/fused_linear_launch.h"
#endif

namespace performer::kernels {
namespace {

std::atomic<int64_t> cuda_max_rows{kDefaultCudaFusedLinearMaxRows};

// A float32 contiguous copy of an optional operand, checked to hold `numel`
// elements.
torch::Tensor Operand(const torch::Tensor& t, int64_t numel, const char* name) {
  if (!t.defined()) return t;
  TORCH_CHECK(t.numel() == numel, "FusedLinear: ", name, " must have ", numel, " elements, got ",
              t.sizes());
  return t.to(torch::kFloat).contiguous();
}

}  // namespace

void SetCudaFusedLinearMaxRows(int64_t rows) { cuda_max_rows.store(rows); }
int64_t CudaFusedLinearMaxRows() { return cuda_max_rows.load(); }

bool FusedLinearSupported(const torch::Tensor& weight) {
  const bool dtype =
      weight.scalar_type() == torch::kFloat || weight.scalar_type() == torch::kBFloat16;
  return dtype && (weight.device().is_cpu() || (weight.is_cuda() && PERFORMER_CUDA_KERNELS != 0));
}

torch::Tensor FusedLinear(const torch::Tensor& x, const torch::Tensor& weight,
                          const FusedLinearOptions& options) {
  CheckKernelDevice(
      "FusedLinear", x,
      {&weight, &options.bias, &options.norm_weight, &options.norm_bias, &options.residual},
      /*cuda_kernel=*/true);
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1),
              "FusedLinear: expected x (rows, in) and weight (out, in), got ", x.sizes(), " and ",
              weight.sizes());
  TORCH_CHECK(x.scalar_type() == torch::kFloat, "FusedLinear: x must be float32, got ",
              x.scalar_type());
  TORCH_CHECK(FusedLinearSupported(weight), "FusedLinear: weight must be float32 or bfloat16, got ",
              weight.scalar_type());
  TORCH_CHECK(!options.norm_bias.defined() || options.norm_weight.defined(),
              "FusedLinear: norm_bias needs norm_weight");
  torch::NoGradGuard no_grad;
  const int64_t rows = x.size(0), in = x.size(1), out = weight.size(0);
  FusedLinearOptions o = options;
  o.bias = Operand(options.bias, out, "bias");
  o.norm_weight = Operand(options.norm_weight, in, "norm_weight");
  o.norm_bias = Operand(options.norm_bias, in, "norm_bias");
  o.residual = Operand(options.residual, rows * out, "residual");
  if (o.residual.defined()) o.residual = o.residual.view({rows, out});
  const torch::Tensor xc = x.contiguous(), wc = weight.contiguous();
  if (rows == 0 || out == 0) return torch::empty({rows, out}, x.options());
#if PERFORMER_CUDA_KERNELS
  if (x.is_cuda()) {
    return cuda::FusedLinearCuda(xc, wc, o, rows <= CudaFusedLinearMaxRows());
  }
#endif
  return cpu::FusedLinearForward(xc, wc, o);
}

}  // namespace performer::kernels
