// performer-init-model: writes a freshly initialised model folder
// (config.json + weights.safetensors) from a config, with a fixed seed, in
// the layout performer-pytorch checkpoints are exported to. Used for the
// repository's default model until a trained one ships, and for bench
// models of any size.
//
//   performer-init-model --config=config.json --out=DIR [--seed=0]
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/io/safetensors.h"
#include "core/models/model_folder.h"
#include "core/models/performer_config.h"
#include "core/models/performer_lm.h"

ABSL_FLAG(std::string, config, "", "config.json of a PerformerLM (model_class may be omitted).");
ABSL_FLAG(std::string, out, "", "Output model folder (created).");
ABSL_FLAG(uint64_t, seed, 0, "torch::manual_seed for the initial weights.");

namespace {

// The reference's sinusoidal table [n, d]: all sines, then all cosines, with
// f_i = 1 / 10000^(2i/d), in float32.
torch::Tensor SinusoidalTable(int64_t n, int64_t d) {
  torch::Tensor inv_freq = 1.0 / torch::pow(10000.0, torch::arange(0, d, 2).to(torch::kFloat) / d);
  torch::Tensor angles = torch::outer(torch::arange(n).to(torch::kFloat), inv_freq);
  return torch::cat({angles.sin(), angles.cos()}, -1);
}

// The reference's Gaussian orthogonal random matrix [m, d] with
// ortho_scaling 0: row-orthonormal blocks from QR, rows scaled by the norms
// of a fresh Gaussian matrix.
torch::Tensor GaussianOrthogonal(int64_t m, int64_t d) {
  std::vector<torch::Tensor> blocks;
  for (int64_t done = 0; done < m; done += d) {
    torch::Tensor q = std::get<0>(torch::linalg_qr(torch::randn({d, d}))).t();
    blocks.push_back(q.narrow(0, 0, std::min(d, m - done)));
  }
  torch::Tensor norms = torch::randn({m, d}).norm(2, 1);
  return torch::diag(norms).matmul(torch::cat(blocks, 0));
}

}  // namespace

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
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model->named_parameters()) tensors[item.key()] = item.value();
  // Buffers the reference computes at construction (ours are filled by
  // loading): the sinusoidal tables and the projection matrices.
  for (const auto& item : model->named_buffers()) {
    const std::string& name = item.key();
    torch::Tensor value = item.value();
    auto ends_with = [&](const std::string& suffix) {
      return name.size() >= suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends_with("pos_emb.emb")) {
      value = SinusoidalTable(value.size(0), value.size(1));
    } else if (ends_with("projection_matrix")) {
      value = GaussianOrthogonal(value.size(0), value.size(1));
    }
    tensors[name] = value;
  }
  std::filesystem::create_directories(out);
  std::ofstream(std::filesystem::path(out) / "config.json") << json.dump(2) << "\n";
  absl::Status saved = performer::io::SaveSafetensors(
      (std::filesystem::path(out) / "weights.safetensors").string(), tensors,
      {{"format", "pt"}, {"producer", "performer-init-model"}});
  if (!saved.ok()) {
    std::cerr << saved << "\n";
    return 1;
  }
  // The folder must load exactly as the server will load it.
  absl::StatusOr<performer::models::LoadedModel> loaded = performer::models::LoadModelFolder(out);
  if (!loaded.ok()) {
    std::cerr << "the written folder does not load: " << loaded.status() << "\n";
    return 1;
  }
  std::cout << "wrote " << out << " (" << tensors.size() << " tensors)\n";
  return 0;
}
