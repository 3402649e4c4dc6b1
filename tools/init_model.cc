// performer-init-model: writes a freshly initialised model folder
// (config.json + weights.safetensors) from a config, with a fixed seed, in
// the layout performer-pytorch checkpoints are exported to. Used for the
// repository's default model until a trained one ships, and for bench
// models of any size.
//
//   performer-init-model --config=config.json --out=DIR [--seed=0]
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/models/initialization.h"
#include "core/models/model_folder.h"
#include "core/models/performer_config.h"
#include "core/models/performer_lm.h"

ABSL_FLAG(std::string, config, "", "config.json of a PerformerLM (model_class may be omitted).");
ABSL_FLAG(std::string, out, "", "Output model folder (created).");
ABSL_FLAG(uint64_t, seed, 0, "torch::manual_seed for the initial weights.");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string config_path = absl::GetFlag(FLAGS_config);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (config_path.empty() || out.empty()) {
    std::cerr << "usage: performer-init-model --config=config.json --out=DIR [--seed=N]\n";
    return 2;
  }
  std::ifstream in(config_path);
  nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    std::cerr << config_path << ": not valid JSON\n";
    return 2;
  }
  json["model_class"] = "PerformerLM";
  absl::StatusOr<performer::models::PerformerLMConfig> config =
      performer::models::ParsePerformerLMConfig(json);
  if (!config.ok()) {
    std::cerr << config_path << ": " << config.status() << "\n";
    return 2;
  }
  torch::manual_seed(absl::GetFlag(FLAGS_seed));
  performer::models::PerformerLM model(*config);
  performer::models::InitializeLikeReference(*model);
  performer::models::ModelFolderWriteOptions options;
  options.metadata["producer"] = "performer-init-model";
  absl::StatusOr<performer::models::LoadedModel> written =
      performer::models::WriteModelFolder(out, json, *model, options);
  if (!written.ok()) {
    std::cerr << written.status() << "\n";
    return 1;
  }
  std::cout << "wrote " << out << " ("
            << model->named_parameters().size() + model->named_buffers().size() << " tensors)\n";
  return 0;
}
