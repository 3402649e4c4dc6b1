#include "kernels/int8_weight.h"

#include <torch/torch.h>

#include "kernels/cpu/weight_formats.h"

namespace performer::kernels {

Int8Weight QuantizeInt8Weight(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kFloat && weight.is_cpu(),
              "int8 weights: expected a (out, in) float32 CPU matrix, got ", weight.sizes(), " ",
              weight.scalar_type(), " on ", weight.device());
  const torch::Tensor w = weight.detach().contiguous();
  const int64_t out = w.size(0), in = w.size(1);
  Int8Weight q{torch::empty({out, in}, torch::kChar),
               torch::empty({out, cpu::Int8BlocksPerRow(in)}, torch::kFloat)};
  TORCH_CHECK(cpu::QuantizeInt8(w.data_ptr<float>(), out, in, q.weight.data_ptr<int8_t>(),
                                q.scales.data_ptr<float>()),
              "int8 weights: a weight is not finite");
  return q;
}

}  // namespace performer::kernels
