#include "core/models/model_class.h"

namespace performer::models {

const char* ModelClassName(ModelClass model_class) {
  switch (model_class) {
    case ModelClass::kPerformerLM:
      return "PerformerLM";
    case ModelClass::kPerformerEncDec:
      return "PerformerEncDec";
    case ModelClass::kFastTransformersLM:
      return "FastTransformersLM";
    case ModelClass::kFastAttention:
      return "FastAttention";
  }
  return "unknown";
}

std::optional<ModelClass> ParseModelClass(std::string_view name) {
  for (ModelClass c : {ModelClass::kPerformerLM, ModelClass::kPerformerEncDec,
                       ModelClass::kFastTransformersLM, ModelClass::kFastAttention}) {
    if (name == ModelClassName(c)) return c;
  }
  return std::nullopt;
}

const char* ModelClassNames() {
  return "PerformerLM, PerformerEncDec, FastTransformersLM or FastAttention";
}

}  // namespace performer::models
