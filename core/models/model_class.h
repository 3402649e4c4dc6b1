// The classes of model a model folder may hold (config.json "model_class").
// Code that treats the classes differently switches over ModelClass with no
// default, so that a new class is one enumerator that the compiler then
// asks every such switch to handle (-Wswitch, an error in our build).
#pragma once

#include <optional>
#include <string_view>

namespace performer::models {

enum class ModelClass {
  kPerformerLM,         // performer-pytorch PerformerLM (performer_lm.h)
  kPerformerEncDec,     // performer-pytorch PerformerEncDec (performer_encdec.h)
  kFastTransformersLM,  // a language model of the library's builders (fast_transformers_lm.h)
  kFastAttention,       // performer-pytorch FastAttention alone (fast_attention.h)
};

// The name config.json uses ("PerformerLM", ...).
const char* ModelClassName(ModelClass model_class);

// The class config.json's "model_class" names; nullopt for any other name.
std::optional<ModelClass> ParseModelClass(std::string_view name);

// Every class's name, for messages: "PerformerLM, PerformerEncDec,
// FastTransformersLM or FastAttention".
const char* ModelClassNames();

}  // namespace performer::models
