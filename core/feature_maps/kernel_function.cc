#include "core/feature_maps/kernel_function.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace performer {
namespace {

const std::map<std::string, KernelFunction>& KernelFunctionsByName() {
  static const auto* names = new std::map<std::string, KernelFunction>{
      {"ReLU", KernelFunction::kReLU}, {"GELU", KernelFunction::kGELU},
      {"SiLU", KernelFunction::kSiLU}, {"Sigmoid", KernelFunction::kSigmoid},
      {"Tanh", KernelFunction::kTanh}, {"Softplus", KernelFunction::kSoftplus},
      {"ELU", KernelFunction::kELU},   {"Identity", KernelFunction::kIdentity}};
  return *names;
}

}  // namespace

absl::StatusOr<KernelFunction> ParseKernelFunction(const std::string& class_name) {
  auto it = KernelFunctionsByName().find(class_name);
  if (it != KernelFunctionsByName().end()) return it->second;
  std::vector<std::string> known;
  for (const auto& entry : KernelFunctionsByName()) known.push_back(entry.first);
  return absl::InvalidArgumentError(absl::StrCat("unsupported kernel_fn '", class_name,
                                                 "'; supported: ", absl::StrJoin(known, ", ")));
}

std::string KernelFunctionName(KernelFunction fn) {
  for (const auto& [name, value] : KernelFunctionsByName()) {
    if (value == fn) return name;
  }
  return "?";
}

}  // namespace performer
