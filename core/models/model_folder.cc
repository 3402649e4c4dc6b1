#include "core/models/model_folder.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/io/bounded_file.h"
#include "core/io/safetensors.h"
#include "core/io/state_dict.h"

namespace performer::models {
namespace {

namespace fs = std::filesystem;

constexpr char kAliasInfix[] = "performer.proj_updater.instance.";
constexpr char kNetInfix[] = "performer.net.";

absl::Status Annotate(const absl::Status& s, const std::string& what) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

// The weights file must be able to hold every parameter and buffer the
// config describes (strict loading needs them all), at one byte per element
// at least: checked before the model is built, so that a config describing a
// model of terabytes is refused instead of allocated.
absl::Status CheckWeightsCanHold(const std::string& config_path, const std::string& weights_path,
                                 uint64_t weights_bytes, uint64_t elements) {
  if (elements <= weights_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      config_path, ": describes a model of at least ", elements, " parameter elements, but ",
      weights_path, " has only ", weights_bytes, " bytes"));
}

}  // namespace

absl::StatusOr<std::map<std::string, torch::Tensor>> NormalizeCheckpointKeys(
    std::map<std::string, torch::Tensor> state_dict) {
  std::map<std::string, torch::Tensor> out;
  std::vector<std::pair<std::string, torch::Tensor>> aliases;
  for (auto& [name, tensor] : state_dict) {
    if (absl::EndsWith(name, "proj_updater.calls_since_last_redraw")) continue;
    if (absl::StrContains(name, kAliasInfix)) {
      aliases.emplace_back(name, tensor);
      continue;
    }
    std::string key = name;
    if (absl::EndsWith(key, "pos_emb.weights_0") || absl::EndsWith(key, "pos_emb.weights_1")) {
      key = absl::StrCat(key.substr(0, key.size() - 2), ".", key.substr(key.size() - 1));
    }
    out[key] = tensor;
  }
  for (auto& [name, tensor] : aliases) {
    std::string original = absl::StrReplaceAll(name, {{kAliasInfix, kNetInfix}});
    auto it = out.find(original);
    if (it == out.end()) {
      out[original] = tensor;  // Only the alias was stored: it is the layer stack.
      continue;
    }
    if (it->second.sizes() != tensor.sizes() ||
        !torch::equal(it->second.to(torch::kFloat), tensor.to(torch::kFloat))) {
      return absl::InvalidArgumentError(
          absl::StrCat("alias tensor ", name, " differs from ", original,
                       " (the reference stores the layer stack twice with identical content)"));
    }
  }
  return out;
}

torch::nn::Module* LoadedModel::module() const {
  if (lm) return lm.ptr().get();
  if (encdec) return encdec.ptr().get();
  if (ftlm) return ftlm.get();
  if (fast_attention) return fast_attention.ptr().get();
  return nullptr;
}

void LoadedModel::MoveTo(const torch::Device& device) {
  if (torch::nn::Module* held = module(); held != nullptr) held->to(device);
}

absl::StatusOr<LoadedModel> LoadModelFolder(const std::string& dir) {
  LoadedModel model;
  model.dir = dir;
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const std::string weights_path = (fs::path(dir) / "weights.safetensors").string();
  absl::StatusOr<nlohmann::json> config = io::ReadJsonFile(config_path);
  if (!config.ok()) return config.status();
  model.config = *std::move(config);
  if (!model.config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": not a JSON object"));
  }
  // Refused here already when it is not a regular file, before the model is
  // built.
  absl::StatusOr<uint64_t> weights_bytes =
      io::RegularFileSize(weights_path, io::kMaxSafetensorsFileBytes);
  if (!weights_bytes.ok()) return weights_bytes.status();
  auto cls = model.config.find("model_class");
  if (cls == model.config.end() || !cls->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, ": missing \"model_class\" (", ModelClassNames(), ")"));
  }
  const std::optional<ModelClass> model_class = ParseModelClass(cls->get<std::string>());
  if (!model_class.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": unknown model_class \"",
                                                   cls->get<std::string>(), "\" (",
                                                   ModelClassNames(), ")"));
  }
  model.model_class = *model_class;
  auto fits = [&](uint64_t elements) {
    return CheckWeightsCanHold(config_path, weights_path, *weights_bytes, elements);
  };
  std::shared_ptr<torch::nn::Module> module;
  // The checks above bound what is allocated; an allocation can still fail
  // (memory is short), which is an error for this folder, not a crash.
  try {
    switch (model.model_class) {
      case ModelClass::kPerformerLM: {
        absl::StatusOr<PerformerLMConfig> c = ParsePerformerLMConfig(model.config);
        if (!c.ok()) return Annotate(c.status(), config_path);
        if (absl::Status s = fits(MinimumParameterElements(*c)); !s.ok()) return s;
        model.lm = PerformerLM(*c);
        module = model.lm.ptr();
        break;
      }
      case ModelClass::kPerformerEncDec: {
        absl::StatusOr<PerformerEncDecConfig> c = ParsePerformerEncDecConfig(model.config);
        if (!c.ok()) return Annotate(c.status(), config_path);
        if (absl::Status s = fits(MinimumParameterElements(*c)); !s.ok()) return s;
        model.encdec = PerformerEncDec(*c);
        module = model.encdec.ptr();
        break;
      }
      case ModelClass::kFastTransformersLM: {
        absl::StatusOr<FastTransformersLMConfig> c = ParseFastTransformersLMConfig(model.config);
        if (!c.ok()) return Annotate(c.status(), config_path);
        absl::StatusOr<uint64_t> elements = MinimumParameterElements(*c);
        if (!elements.ok()) return Annotate(elements.status(), config_path);
        if (absl::Status s = fits(*elements); !s.ok()) return s;
        absl::StatusOr<FastTransformersLM> ftlm = FastTransformersLMImpl::Create(*c);
        if (!ftlm.ok()) return Annotate(ftlm.status(), config_path);
        model.ftlm = *std::move(ftlm);
        module = model.ftlm;
        break;
      }
      case ModelClass::kFastAttention: {
        absl::StatusOr<FastAttentionConfig> c = ParseFastAttentionConfig(model.config);
        if (!c.ok()) return Annotate(c.status(), config_path);
        if (absl::Status s = fits(MinimumParameterElements(*c)); !s.ok()) return s;
        model.fast_attention = FastAttention(*c);
        module = model.fast_attention.ptr();
        break;
      }
    }
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(config_path, ": cannot build the model: ", e.what()));
  }
  absl::StatusOr<std::map<std::string, torch::Tensor>> weights = io::LoadSafetensors(weights_path);
  if (!weights.ok()) return weights.status();
  try {
    absl::StatusOr<std::map<std::string, torch::Tensor>> normalized =
        NormalizeCheckpointKeys(*std::move(weights));
    if (!normalized.ok()) return Annotate(normalized.status(), weights_path);
    if (absl::Status s = io::LoadStateDict(*module, *normalized, /*strict=*/true); !s.ok()) {
      return Annotate(s, weights_path);
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(weights_path, ": cannot load: ", e.what()));
  }
  module->eval();
  return model;
}

absl::StatusOr<LoadedModel> WriteModelFolder(const std::string& dir, const nlohmann::json& config,
                                             const torch::nn::Module& model,
                                             const ModelFolderWriteOptions& options) {
  if (options.dtype != torch::kFloat && options.dtype != torch::kHalf &&
      options.dtype != torch::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model folder weights are F32, F16 or BF16, not ", c10::toString(options.dtype)));
  }
  if (!config.is_object() || !config.contains("model_class")) {
    return absl::InvalidArgumentError("the config of a model folder must name its \"model_class\"");
  }
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat(dir, ": cannot create: ", error.message()));
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& [name, tensor] : io::StateDict(model)) {
    tensors[name] = tensor.to(torch::kCPU, options.dtype).contiguous();
  }
  std::map<std::string, std::string> metadata = options.metadata;
  metadata["format"] = "pt";
  if (absl::Status s =
          io::SaveSafetensors((fs::path(dir) / "weights.safetensors").string(), tensors, metadata);
      !s.ok()) {
    return s;
  }
  auto write_json = [&](const char* file, const nlohmann::json& json) -> absl::Status {
    const fs::path path = fs::path(dir) / file;
    std::ofstream out(path);
    out << json.dump(2) << "\n";
    out.close();
    if (!out) return absl::InternalError(absl::StrCat(path.string(), ": cannot write"));
    return absl::OkStatus();
  };
  if (absl::Status s = write_json("config.json", config); !s.ok()) return s;
  if (!options.tokenizer.is_null()) {
    if (absl::Status s = write_json("tokenizer.json", options.tokenizer); !s.ok()) return s;
  }
  absl::StatusOr<LoadedModel> loaded = LoadModelFolder(dir);
  if (!loaded.ok()) {
    return Annotate(loaded.status(), absl::StrCat(dir, ": the written folder does not load"));
  }
  return loaded;
}

}  // namespace performer::models
