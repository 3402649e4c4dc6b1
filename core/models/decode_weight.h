// The decode copy of a weight matrix for DecodeStepOptions::weight_dtype
// (core/models/decode_step_options.h): the float32 weight itself (shared,
// not copied) or a bfloat16 copy rounded to nearest even. Contiguous.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "core/models/decode_step_options.h"

namespace performer::models {

torch::Tensor DecodeWeight(const torch::Tensor& weight, WeightDtype dtype);

// Bytes of the distinct storages of `tensors` (undefined ones skipped): a
// tensor that shares another's storage (a float32 decode weight and its
// parameter) counts once.
int64_t DistinctStorageBytes(const std::vector<torch::Tensor>& tensors);

// A module's parameters then its buffers (recursively): the tensors whose
// bytes DistinctStorageBytes counts as a model's weights.
std::vector<torch::Tensor> ParametersAndBuffers(const torch::nn::Module& module);

}  // namespace performer::models
