// Loading a model folder: config.json (the constructor keywords plus
// "model_class", see performer_config.h) and weights.safetensors (the
// PyTorch state_dict). Buffers (projection matrices, sinusoidal and rotary
// tables) are loaded, never re-sampled. The reference's alias copies under
// "performer.proj_updater.instance." must equal their "performer.net."
// originals and are then dropped, as is the redraw counter; the 0.2.x axial
// names "weights_0"/"weights_1" are accepted. F32/F16/BF16 (and F64)
// tensors load and are converted to float32. Missing, unexpected and
// mis-shaped keys are one InvalidArgument error that lists the names.
//
// A hostile folder gets an error naming the file, never a crash or a hang:
// config.json and weights.safetensors must be regular files (a FIFO is
// refused without blocking), config.json at most 16 MiB and nested at most
// 64 levels (core/io/bounded_file.h); every config value is bounded
// (performer_config.h, fast_transformers_lm.h) and the weights file must be
// able to hold the parameters the config describes before anything is
// allocated (MinimumParameterElements); the weights file's header is
// validated with overflow-checked sizes (core/io/safetensors.h).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "core/models/fast_attention.h"
#include "core/models/fast_transformers_lm.h"
#include "core/models/model_class.h"
#include "core/models/performer_encdec.h"
#include "core/models/performer_lm.h"

namespace performer::models {

struct LoadedModel {
  std::string dir;
  // Which one of the four handles below holds the model; the others are
  // null.
  ModelClass model_class = ModelClass::kPerformerLM;
  nlohmann::json config;                  // config.json as read
  PerformerLM lm{nullptr};                // kPerformerLM
  PerformerEncDec encdec{nullptr};        // kPerformerEncDec
  FastTransformersLM ftlm;                // kFastTransformersLM
  FastAttention fast_attention{nullptr};  // kFastAttention

  // Whichever of the handles above holds the model, as a module; null when
  // none does.
  torch::nn::Module* module() const;

  // Moves the parameters and buffers of whichever module is held to
  // `device` (dtypes unchanged).
  void MoveTo(const torch::Device& device);
};

// Builds the model in eval mode with every parameter loaded.
absl::StatusOr<LoadedModel> LoadModelFolder(const std::string& dir);

// Writes a model folder: config.json (`config`, which must name its
// "model_class"), weights.safetensors (every parameter and buffer of `model`
// by state-dict name, as `dtype`) and, when `tokenizer` is not null,
// tokenizer.json. The folder is created and existing files are replaced.
// The folder is then loaded back with LoadModelFolder, which is returned: a
// folder written without error is one the server loads.
struct ModelFolderWriteOptions {
  torch::ScalarType dtype = torch::kFloat;      // kFloat, kHalf or kBFloat16
  nlohmann::json tokenizer;                     // tokenizer.json contents, or null
  std::map<std::string, std::string> metadata;  // safetensors __metadata__ ("format": "pt" added)
};
absl::StatusOr<LoadedModel> WriteModelFolder(const std::string& dir, const nlohmann::json& config,
                                             const torch::nn::Module& model,
                                             const ModelFolderWriteOptions& options = {});

// Applies the alias / counter / axial-name rules above to a raw state dict.
absl::StatusOr<std::map<std::string, torch::Tensor>> NormalizeCheckpointKeys(
    std::map<std::string, torch::Tensor> state_dict);

}  // namespace performer::models
