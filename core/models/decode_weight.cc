#include "core/models/decode_weight.h"

#include <torch/torch.h>

namespace performer::models {

torch::Tensor DecodeWeight(const torch::Tensor& weight, WeightDtype dtype) {
  torch::NoGradGuard no_grad;
  switch (dtype) {
    case WeightDtype::kBFloat16:
      return weight.detach().to(torch::kBFloat16).contiguous();
    case WeightDtype::kFloat32:
      break;
  }
  return weight.detach().contiguous();
}

}  // namespace performer::models
