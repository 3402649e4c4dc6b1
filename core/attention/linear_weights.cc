#include "core/attention/linear_weights.h"

#include <torch/torch.h>

#include <map>
#include <tuple>

#include "kernels/int8_weight.h"

namespace performer {

WeightMatrix CompactWeight(const torch::Tensor& weight, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(weight.scalar_type() == torch::kFloat,
              "CompactWeight: expected a float32 weight, got ", weight.scalar_type());
  switch (dtype) {
    case torch::kFloat:
      return {weight.detach(), torch::Tensor()};
    case torch::kBFloat16:
      return {weight.detach().to(torch::kBFloat16).contiguous(), torch::Tensor()};
    case torch::kChar: {
      kernels::Int8Weight q = kernels::QuantizeInt8Weight(weight);
      return {q.weight, q.scales};
    }
    default:
      TORCH_CHECK(false, "CompactWeight: weights are served in float32, bfloat16 or int8, not ",
                  dtype);
  }
}

void ConvertLinearWeights(const std::vector<torch::nn::Module*>& roots, torch::ScalarType dtype) {
  if (dtype == torch::kFloat) return;
  torch::NoGradGuard no_grad;
  // Keyed by the float32 weight's place in memory, so aliases convert once.
  std::map<std::tuple<const void*, std::vector<int64_t>>, WeightMatrix> converted;
  auto convert = [&](torch::nn::Module* module) {
    auto* linear = dynamic_cast<torch::nn::LinearImpl*>(module);
    if (linear == nullptr || linear->weight.scalar_type() == dtype) return;
    torch::Tensor& weight = linear->weight;
    TORCH_CHECK(weight.scalar_type() == torch::kFloat, "ConvertLinearWeights: a ",
                weight.scalar_type(), " weight cannot be converted to ", dtype);
    const auto key =
        std::make_tuple(static_cast<const void*>(weight.data_ptr()), weight.sizes().vec());
    auto it = converted.find(key);
    if (it == converted.end()) it = converted.emplace(key, CompactWeight(weight, dtype)).first;
    weight.requires_grad_(false);
    weight.set_data(it->second.weight);
    if (it->second.scales.defined())
      linear->register_buffer(kLinearWeightScales, it->second.scales);
  };
  for (torch::nn::Module* root : roots) {
    // The root itself need not be held by a shared_ptr (modules(true) would
    // require it).
    convert(root);
    for (const std::shared_ptr<torch::nn::Module>& module : root->modules(/*include_self=*/false)) {
      convert(module.get());
    }
  }
}

torch::Tensor LinearWeightScales(const torch::nn::LinearImpl& layer) {
  if (layer.weight.scalar_type() != torch::kChar) return torch::Tensor();
  const torch::OrderedDict<std::string, torch::Tensor> buffers =
      layer.named_buffers(/*recurse=*/false);
  const torch::Tensor* scales = buffers.find(kLinearWeightScales);
  TORCH_CHECK(scales != nullptr, "an int8 Linear layer has no ", kLinearWeightScales);
  return *scales;
}

}  // namespace performer
