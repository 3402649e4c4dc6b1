#include "kernels/fused_linear.h"

#include <torch/torch.h>

#include <atomic>

#include "kernels/cpu/fused_linear_cpu.h"
#include "kernels/cpu/weight_formats.h"
#include "kernels/cuda_row_invariance.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/fused_linear_launch.h"
#endif

namespace performer::kernels {
namespace {

std::atomic<int64_t> cuda_max_rows{kDefaultCudaFusedLinearMaxRows};
std::atomic<bool> cuda_tensor_cores{false};

torch::Tensor Operand(const torch::Tensor& t, int64_t numel, const char* name) {
  return FloatOperand("FusedLinear", t, numel, name);
}

}  // namespace

void SetCudaFusedLinearMaxRows(int64_t rows) { cuda_max_rows.store(rows); }
int64_t CudaFusedLinearMaxRows() { return cuda_max_rows.load(); }
void SetCudaFusedLinearTensorCores(bool enabled) { cuda_tensor_cores.store(enabled); }
bool CudaFusedLinearTensorCores() { return cuda_tensor_cores.load(); }

torch::Tensor GeluRows(const torch::Tensor& x) {
  if (x.device().is_cpu() && x.scalar_type() == torch::kFloat && x.dim() > 0 && x.numel() > 0) {
    return cpu::GeluRows(x);
  }
  return at::gelu(x);
}

bool FusedLinearSupported(const torch::Tensor& weight) {
  const torch::ScalarType t = weight.scalar_type();
  if (weight.device().is_cpu()) {
    return t == torch::kFloat || t == torch::kBFloat16 || t == torch::kChar;
  }
  return (t == torch::kFloat || t == torch::kBFloat16) && weight.is_cuda() &&
         PERFORMER_CUDA_KERNELS != 0;
}

torch::Tensor FusedLinear(const torch::Tensor& x, const torch::Tensor& weight,
                          const FusedLinearOptions& options) {
  CheckKernelDevice("FusedLinear", x,
                    {&weight, &options.bias, &options.norm_weight, &options.norm_bias,
                     &options.residual, &options.weight_scales},
                    /*cuda_kernel=*/true);
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1),
              "FusedLinear: expected x (rows, in) and weight (out, in), got ", x.sizes(), " and ",
              weight.sizes());
  TORCH_CHECK(x.scalar_type() == torch::kFloat, "FusedLinear: x must be float32, got ",
              x.scalar_type());
  TORCH_CHECK(FusedLinearSupported(weight),
              "FusedLinear: weight must be float32 or bfloat16 (or int8 on the CPU), got ",
              weight.scalar_type(), " on ", weight.device());
  const bool int8 = weight.scalar_type() == torch::kChar;
  TORCH_CHECK(int8 == options.weight_scales.defined(),
              int8 ? "FusedLinear: int8 weights need weight_scales"
                   : "FusedLinear: weight_scales go with int8 weights only");
  TORCH_CHECK(!options.norm_bias.defined() || options.norm_weight.defined(),
              "FusedLinear: norm_bias needs norm_weight");
  torch::NoGradGuard no_grad;
  const int64_t rows = x.size(0), in = x.size(1), out = weight.size(0);
  FusedLinearOptions o = options;
  o.bias = Operand(options.bias, out, "bias");
  o.norm_weight = Operand(options.norm_weight, in, "norm_weight");
  o.norm_bias = Operand(options.norm_bias, in, "norm_bias");
  o.residual = Operand(options.residual, rows * out, "residual");
  if (int8) {
    TORCH_CHECK(options.weight_scales.scalar_type() == torch::kFloat,
                "FusedLinear: weight_scales must be float32, got ",
                options.weight_scales.scalar_type());
    o.weight_scales =
        Operand(options.weight_scales, out * cpu::Int8BlocksPerRow(in), "weight_scales");
  }
  if (o.residual.defined()) o.residual = o.residual.view({rows, out});
  const torch::Tensor xc = x.contiguous(), wc = weight.contiguous();
  if (rows == 0 || out == 0) return torch::empty({rows, out}, x.options());
#if PERFORMER_CUDA_KERNELS
  if (x.is_cuda()) {
    return cuda::FusedLinearCuda(xc, wc, o,
                                 rows <= CudaFusedLinearMaxRows() || CudaRowInvariance());
  }
#endif
  return cpu::FusedLinearForward(xc, wc, o);
}

}  // namespace performer::kernels
