// The weights of a model's linear layers in the dtype it is served in
// (--weight_dtype): float32, bfloat16 (rounded to nearest even) or int8 with
// one float32 scale per block of 32 inputs (kernels/int8_weight.h). Every
// projection goes through core/attention/linear_rows.h, whose entry points
// take a torch::nn::Linear of any of these dtypes, so a model converted here
// runs its prefill and its decode step on the compact weights and holds no
// float32 copy of them. Sums stay float32; embeddings, norms, feature maps and
// states are not Linear layers and stay float32. Inference only: a converted
// layer has no gradient.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <vector>

namespace performer {

// A weight matrix in a serving dtype: `scales` is defined for int8 only.
struct WeightMatrix {
  torch::Tensor weight;
  torch::Tensor scales;
};

// `weight` (out, in) float32 in `dtype` (kFloat, kBFloat16, or kChar on the
// CPU): kFloat returns the tensor itself, the others a contiguous copy.
WeightMatrix CompactWeight(const torch::Tensor& weight, torch::ScalarType dtype);

// Converts, in place, the weight of every torch::nn::Linear under `roots` to
// `dtype` (set_data: every handle of the parameter sees it); int8 scales
// become the layer's buffer kLinearWeightScales. Layers that share a weight's
// storage (mirrored modules) share the converted one. Layers already in
// `dtype` are left as they are; converting compact weights to another dtype
// throws. kFloat changes nothing.
void ConvertLinearWeights(const std::vector<torch::nn::Module*>& roots, torch::ScalarType dtype);

inline constexpr char kLinearWeightScales[] = "weight_scales";

// The layer's int8 scales (undefined unless its weight is int8).
torch::Tensor LinearWeightScales(const torch::nn::LinearImpl& layer);

}  // namespace performer
