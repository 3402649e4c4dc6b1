#include "core/training/checkpoint.h"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace performer::training {
namespace {

namespace fs = std::filesystem;

constexpr char kFormat[] = "performer-train-checkpoint/1";

void WriteState(torch::serialize::OutputArchive& archive, const TrainingState& state) {
  archive.write("format", c10::IValue(std::string(kFormat)));
  archive.write("step", c10::IValue(state.step));
  archive.write("model_config", c10::IValue(state.model_config.dump()));
  archive.write("options", c10::IValue(state.options.dump()));
  archive.write("data_fingerprint", c10::IValue(static_cast<int64_t>(state.data_fingerprint)));
  archive.write("calls_since_last_redraw", c10::IValue(state.calls_since_last_redraw));
  archive.write("rng_state", state.rng_state, /*is_buffer=*/true);
  archive.write("sampler_state", state.sampler_state, /*is_buffer=*/true);
  archive.write("sampler_batches", c10::IValue(state.sampler_batches));
}

// Throws c10::Error (caught by the callers) for a missing or mistyped entry.
TrainingState ReadState(torch::serialize::InputArchive& archive, const std::string& path) {
  c10::IValue value;
  TORCH_CHECK(
      archive.try_read("format", value) && value.isString() && value.toStringRef() == kFormat, path,
      ": not a performer-train checkpoint (", kFormat, ")");
  TrainingState state;
  archive.read("step", value);
  state.step = value.toInt();
  archive.read("model_config", value);
  state.model_config = nlohmann::json::parse(value.toStringRef());
  archive.read("options", value);
  state.options = nlohmann::json::parse(value.toStringRef());
  archive.read("data_fingerprint", value);
  state.data_fingerprint = static_cast<uint64_t>(value.toInt());
  archive.read("calls_since_last_redraw", value);
  state.calls_since_last_redraw = value.toInt();
  archive.read("rng_state", state.rng_state, /*is_buffer=*/true);
  archive.read("sampler_state", state.sampler_state, /*is_buffer=*/true);
  archive.read("sampler_batches", value);
  state.sampler_batches = value.toInt();
  return state;
}

absl::Status ReadError(const std::string& path, const std::exception& e) {
  const std::string what = e.what();
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": cannot read the checkpoint: ", what.substr(0, what.find('\n'))));
}

}  // namespace

absl::Status SaveCheckpoint(const std::string& path, const TrainingState& state,
                            const torch::nn::Module& model,
                            const torch::optim::Optimizer& optimizer) {
  const fs::path target(path);
  std::error_code error;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), error);
  if (error) return absl::InternalError(absl::StrCat(path, ": ", error.message()));
  const std::string temporary = path + ".tmp";
  try {
    torch::serialize::OutputArchive archive;
    WriteState(archive, state);
    torch::serialize::OutputArchive model_archive, optimizer_archive;
    model.save(model_archive);
    optimizer.save(optimizer_archive);
    archive.write("model", model_archive);
    archive.write("optimizer", optimizer_archive);
    archive.save_to(temporary);
  } catch (const std::exception& e) {
    fs::remove(temporary, error);
    return absl::InternalError(absl::StrCat(path, ": cannot write the checkpoint: ", e.what()));
  }
  fs::rename(temporary, target, error);
  if (error) return absl::InternalError(absl::StrCat(path, ": ", error.message()));
  return absl::OkStatus();
}

absl::StatusOr<TrainingState> ReadTrainingState(const std::string& path) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    return ReadState(archive, path);
  } catch (const std::exception& e) {
    return ReadError(path, e);
  }
}

absl::StatusOr<TrainingState> LoadCheckpoint(const std::string& path, torch::nn::Module& model,
                                             torch::optim::Optimizer& optimizer) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    TrainingState state = ReadState(archive, path);
    torch::serialize::InputArchive model_archive, optimizer_archive;
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    model.load(model_archive);
    optimizer.load(optimizer_archive);
    return state;
  } catch (const std::exception& e) {
    return ReadError(path, e);
  }
}

std::string CheckpointPath(const std::string& dir, int64_t step) {
  return (fs::path(dir) / absl::StrFormat("step-%08d.pt", step)).string();
}

absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path) {
  std::error_code error;
  if (!fs::is_directory(path, error)) {
    if (fs::is_regular_file(path, error)) return path;
    return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint file or folder"));
  }
  int64_t best_step = -1;
  std::string best;
  for (const fs::directory_entry& entry : fs::directory_iterator(path, error)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (!absl::StartsWith(name, "step-") || !absl::EndsWith(name, ".pt") ||
        !absl::SimpleAtoi(name.substr(5, name.size() - 8), &step)) {
      continue;
    }
    if (step > best_step) {
      best_step = step;
      best = entry.path().string();
    }
  }
  if (best.empty())
    return absl::NotFoundError(absl::StrCat(path, ": holds no step-*.pt checkpoint"));
  return best;
}

}  // namespace performer::training
