#include "core/io/state_dict.h"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace performer::io {
namespace {

// Parameters and buffers by name, aliasing the module's tensors.
std::map<std::string, torch::Tensor> NamedTensors(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (item.value().defined()) tensors.emplace(item.key(), item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    if (item.value().defined()) tensors.emplace(item.key(), item.value());
  }
  return tensors;
}

std::string ShapeString(const torch::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes().vec(), ", "), "]");
}

std::string QuotedList(const std::vector<std::string>& names) {
  return absl::StrJoin(names, ", ", [](std::string* out, const std::string& name) {
    absl::StrAppend(out, "\"", name, "\"");
  });
}

}  // namespace

absl::Status LoadStateDict(torch::nn::Module& module,
                           const std::map<std::string, torch::Tensor>& state_dict, bool strict) {
  std::map<std::string, torch::Tensor> targets = NamedTensors(module);
  std::vector<std::string> missing;
  std::vector<std::string> unexpected;
  std::vector<std::string> mismatched;
  for (const auto& [name, target] : targets) {
    auto it = state_dict.find(name);
    if (it == state_dict.end()) {
      missing.push_back(name);
    } else if (!it->second.defined() || it->second.sizes() != target.sizes()) {
      mismatched.push_back(absl::StrCat(
          "size mismatch for ", name, ": copying a param with shape ",
          it->second.defined() ? ShapeString(it->second) : std::string("<undefined>"),
          " from checkpoint, the shape in current model is ", ShapeString(target), "."));
    }
  }
  for (const auto& entry : state_dict) {
    if (targets.count(entry.first) == 0) unexpected.push_back(entry.first);
  }
  std::vector<std::string> problems;
  if (strict && !missing.empty()) {
    problems.push_back(absl::StrCat("Missing key(s) in state_dict: ", QuotedList(missing), "."));
  }
  if (strict && !unexpected.empty()) {
    problems.push_back(
        absl::StrCat("Unexpected key(s) in state_dict: ", QuotedList(unexpected), "."));
  }
  problems.insert(problems.end(), mismatched.begin(), mismatched.end());
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Error(s) in loading state_dict for ", module.name(), ": ", absl::StrJoin(problems, " ")));
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, target] : targets) {
    auto it = state_dict.find(name);
    if (it != state_dict.end()) target.copy_(it->second);
  }
  return absl::OkStatus();
}

std::map<std::string, torch::Tensor> StateDict(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, tensor] : NamedTensors(module)) out.emplace(name, tensor.detach());
  return out;
}

}  // namespace performer::io
