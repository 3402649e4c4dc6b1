#include "core/models/model_weights.h"

#include <torch/torch.h>

#include <unordered_set>

namespace performer::models {

torch::ScalarType WeightScalarType(WeightDtype dtype) {
  switch (dtype) {
    case WeightDtype::kBFloat16:
      return torch::kBFloat16;
    case WeightDtype::kInt8:
      return torch::kChar;
    case WeightDtype::kFloat32:
      break;
  }
  return torch::kFloat;
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
