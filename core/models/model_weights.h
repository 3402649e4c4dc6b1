// A served model's weights: the dtype its linear layers are served in
// (DecodeStepOptions::weight_dtype, core/attention/linear_weights.h) and the
// bytes they take.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "core/models/decode_step_options.h"

namespace performer::models {

// The tensor dtype of `dtype`: kFloat, kBFloat16, kChar (int8).
torch::ScalarType WeightScalarType(WeightDtype dtype);

// Bytes of the distinct storages of `tensors` (undefined ones skipped): a
// tensor that shares another's storage (the q/k/v layers' views of their
// fused matrix) counts once.
int64_t DistinctStorageBytes(const std::vector<torch::Tensor>& tensors);

// A module's parameters then its buffers (recursively): the tensors whose
// bytes DistinctStorageBytes counts as a model's weights.
std::vector<torch::Tensor> ParametersAndBuffers(const torch::nn::Module& module);

}  // namespace performer::models
