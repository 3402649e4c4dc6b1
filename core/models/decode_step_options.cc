#include "core/models/decode_step_options.h"

namespace performer::models {

const char* WeightDtypeName(WeightDtype dtype) {
  switch (dtype) {
    case WeightDtype::kFloat32:
      return "fp32";
    case WeightDtype::kBFloat16:
      return "bf16";
    case WeightDtype::kInt8:
      return "int8";
  }
  return "fp32";
}

std::optional<WeightDtype> ParseWeightDtype(std::string_view text) {
  for (WeightDtype d : {WeightDtype::kFloat32, WeightDtype::kBFloat16, WeightDtype::kInt8}) {
    if (text == WeightDtypeName(d)) return d;
  }
  return std::nullopt;
}

}  // namespace performer::models
