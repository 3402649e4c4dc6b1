// The torch.nn activation used by performer-pytorch's generalized kernel
// (kernel_fn). Checkpoint configs store its class name ("ReLU").
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace performer {

enum class KernelFunction { kReLU, kGELU, kSiLU, kSigmoid, kTanh, kSoftplus, kELU, kIdentity };

// InvalidArgument naming the supported classes for any other name.
absl::StatusOr<KernelFunction> ParseKernelFunction(const std::string& class_name);
std::string KernelFunctionName(KernelFunction fn);

}  // namespace performer
