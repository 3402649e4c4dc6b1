#include "core/models/decode_weight.h"

#include <torch/torch.h>

#include <unordered_set>

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

int64_t DistinctStorageBytes(const std::vector<torch::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  int64_t bytes = 0;
  for (const torch::Tensor& t : tensors) {
    if (!t.defined()) continue;
    const c10::Storage& storage = t.storage();
    if (seen.insert(storage.data()).second) bytes += static_cast<int64_t>(storage.nbytes());
  }
  return bytes;
}

std::vector<torch::Tensor> ParametersAndBuffers(const torch::nn::Module& module) {
  std::vector<torch::Tensor> tensors = module.parameters();
  for (const torch::Tensor& b : module.buffers()) tensors.push_back(b);
  return tensors;
}

}  // namespace performer::models
