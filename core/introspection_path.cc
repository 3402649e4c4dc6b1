#include "core/introspection_path.h"

#include <torch/torch.h>

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/introspection.h"

namespace performer {
namespace {

nlohmann::json ShapeToJson(const torch::Tensor& t) {
  nlohmann::json out = nlohmann::json::array();
  for (int64_t s : t.sizes()) out.push_back(s);
  return out;
}

// Python's str(tensor.dtype) without the "torch." prefix.
std::string DtypeName(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat:
      return "float32";
    case torch::kDouble:
      return "float64";
    case torch::kHalf:
      return "float16";
    case torch::kBFloat16:
      return "bfloat16";
    case torch::kLong:
      return "int64";
    case torch::kInt:
      return "int32";
    case torch::kBool:
      return "bool";
    default:
      return std::string(c10::toString(t.scalar_type()));
  }
}

nlohmann::json TensorValuesToJson(const torch::Tensor& t) {
  torch::Tensor flat = t.detach().to(torch::kCPU).contiguous().reshape({-1});
  const bool is_bool = t.scalar_type() == torch::kBool;
  const bool is_integral = !is_bool && !t.is_floating_point();
  std::vector<nlohmann::json> leaves;
  leaves.reserve(flat.numel());
  if (is_bool) {
    auto acc = flat.accessor<bool, 1>();
    for (int64_t i = 0; i < flat.numel(); ++i) leaves.emplace_back(acc[i]);
  } else if (is_integral) {
    torch::Tensor v = flat.to(torch::kLong);
    auto acc = v.accessor<int64_t, 1>();
    for (int64_t i = 0; i < v.numel(); ++i) leaves.emplace_back(acc[i]);
  } else {
    torch::Tensor v = flat.to(torch::kDouble);
    auto acc = v.accessor<double, 1>();
    for (int64_t i = 0; i < v.numel(); ++i) leaves.emplace_back(acc[i]);
  }
  if (t.dim() == 0) return leaves.at(0);
  // Group the leaves from the innermost axis outwards.
  std::vector<nlohmann::json> level = std::move(leaves);
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t size = t.size(d);
    std::vector<nlohmann::json> next;
    if (size == 0) {
      // An empty axis: every outer entry is an empty list.
      int64_t outer = 1;
      for (int64_t k = 0; k < d; ++k) outer *= t.size(k);
      next.assign(outer, nlohmann::json::array());
    } else {
      for (size_t start = 0; start < level.size(); start += size) {
        nlohmann::json group = nlohmann::json::array();
        for (int64_t k = 0; k < size; ++k) group.push_back(std::move(level[start + k]));
        next.push_back(std::move(group));
      }
    }
    level = std::move(next);
    if (d == 0) break;
  }
  return level.at(0);
}

// Attributes of LibTorch's own modules under their Python names.
std::optional<nlohmann::json> TorchModuleAttribute(const torch::nn::Module& module,
                                                   const std::string& name) {
  if (const auto* linear = dynamic_cast<const torch::nn::LinearImpl*>(&module)) {
    if (name == "in_features") return linear->options.in_features();
    if (name == "out_features") return linear->options.out_features();
  }
  if (const auto* norm = dynamic_cast<const torch::nn::LayerNormImpl*>(&module)) {
    if (name == "eps") return norm->options.eps();
    if (name == "normalized_shape") return norm->options.normalized_shape();
    if (name == "elementwise_affine") return norm->options.elementwise_affine();
  }
  if (const auto* dropout = dynamic_cast<const torch::nn::DropoutImpl*>(&module)) {
    if (name == "p") return dropout->options.p();
    if (name == "inplace") return dropout->options.inplace();
  }
  if (const auto* embedding = dynamic_cast<const torch::nn::EmbeddingImpl*>(&module)) {
    if (name == "num_embeddings") return embedding->options.num_embeddings();
    if (name == "embedding_dim") return embedding->options.embedding_dim();
  }
  if (name == "training") return module.is_training();
  return std::nullopt;
}

absl::Status NoAttribute(const std::string& owner, const std::string& part,
                         const std::string& path) {
  return absl::NotFoundError(
      absl::StrCat("'", owner, "' object has no attribute '", part, "' (resolving '", path, "')"));
}

}  // namespace

std::string PythonClassName(const torch::nn::Module& module) {
  if (const auto* introspectable = dynamic_cast<const Introspectable*>(&module)) {
    return introspectable->class_name();
  }
  // The demangled C++ type, e.g. "torch::nn::LayerNormImpl": drop the
  // namespaces (ignoring any inside template arguments) and the Impl suffix.
  std::string name = module.name();
  const size_t template_start = name.find('<');
  const size_t last_colon = name.rfind("::", template_start);
  if (last_colon != std::string::npos) name = name.substr(last_colon + 2);
  const std::string suffix = "Impl";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    name.resize(name.size() - suffix.size());
  }
  return name;
}

absl::StatusOr<nlohmann::json> InspectPath(const torch::nn::Module& root, const std::string& path) {
  const std::vector<std::string> parts = absl::StrSplit(path, '.');
  const torch::nn::Module* module = &root;
  std::optional<torch::Tensor> tensor;
  std::optional<nlohmann::json> value;

  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (module != nullptr) {
      if (part == "__class__") {
        value = PythonClassName(*module);
        module = nullptr;
        continue;
      }
      const auto children = module->named_children();
      if (const auto* child = children.find(part)) {
        module = child->get();
        continue;
      }
      const auto params = module->named_parameters(/*recurse=*/false);
      if (const auto* p = params.find(part)) {
        tensor = *p;
        module = nullptr;
        continue;
      }
      const auto buffers = module->named_buffers(/*recurse=*/false);
      if (const auto* b = buffers.find(part)) {
        tensor = *b;
        module = nullptr;
        continue;
      }
      if (const auto* introspectable = dynamic_cast<const Introspectable*>(module)) {
        if (std::optional<ParamValue> attr = introspectable->attribute(part)) {
          value = ParamValueToJson(*attr);
          module = nullptr;
          continue;
        }
        // A settings attribute may be exposed under a dotted name when the
        // reference keeps it on a helper object (e.g. "dropout.p").
        if (i + 1 < parts.size()) {
          const std::string rest =
              absl::StrJoin(parts.begin() + static_cast<std::ptrdiff_t>(i), parts.end(), ".");
          if (std::optional<ParamValue> attr = introspectable->attribute(rest)) {
            return ParamValueToJson(*attr);
          }
        }
      }
      if (std::optional<nlohmann::json> attr = TorchModuleAttribute(*module, part)) {
        value = std::move(*attr);
        module = nullptr;
        continue;
      }
      return NoAttribute(PythonClassName(*module), part, path);
    }
    if (tensor.has_value()) {
      if (part == "shape") {
        value = ShapeToJson(*tensor);
      } else if (part == "dtype") {
        value = DtypeName(*tensor);
      } else if (part == "ndim") {
        value = tensor->dim();
      } else if (part == "requires_grad") {
        value = tensor->requires_grad();
      } else {
        return NoAttribute(tensor->is_floating_point() ? "Parameter" : "Tensor", part, path);
      }
      tensor.reset();
      continue;
    }
    // A plain value (number, string, list): nothing further to resolve.
    const char* type = value->is_string()           ? "str"
                       : value->is_boolean()        ? "bool"
                       : value->is_number_integer() ? "int"
                       : value->is_number()         ? "float"
                       : value->is_null()           ? "NoneType"
                                                    : "list";
    return NoAttribute(type, part, path);
  }
  if (module != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' names a module (", PythonClassName(*module), "), not a value"));
  }
  if (tensor.has_value()) return TensorValuesToJson(*tensor);
  return *std::move(value);
}

}  // namespace performer
