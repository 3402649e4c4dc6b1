// Loading a PyTorch-style state dict (name -> tensor) into a module, like
// torch.nn.Module.load_state_dict:
//
//   names are the module's named_parameters() and named_buffers() (recursive,
//   "a.b.weight"); every value is copied into the existing tensor (dtype and
//   device of the module are kept) under torch::NoGradGuard, so parameters
//   stay leaves that require grad.
//
//   strict = true   missing keys (in the module, not in the map) and
//                   unexpected keys (in the map, not in the module) are errors
//   strict = false  they are ignored
//   always          a shape mismatch is an error
//
// Nothing is copied unless every check passes. The InvalidArgument message
// lists every problem by name, as PyTorch does:
//   Error(s) in loading state_dict for <module name>: Missing key(s) in
//   state_dict: "a", "b". Unexpected key(s) in state_dict: "c". size mismatch
//   for d: copying a param with shape [2, 3] from checkpoint, the shape in
//   current model is [3, 2].
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <map>
#include <string>

#include "absl/status/status.h"

namespace performer::io {

absl::Status LoadStateDict(torch::nn::Module& module,
                           const std::map<std::string, torch::Tensor>& state_dict,
                           bool strict = true);

// The module's parameters and buffers by state-dict name (detached aliases).
std::map<std::string, torch::Tensor> StateDict(const torch::nn::Module& module);

}  // namespace performer::io
