#include "core/training/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/models/initialization.h"
#include "core/training/checkpoint.h"

namespace performer::training {
namespace {

// The data order gets a stream of its own, derived from the run's seed.
uint64_t SamplerSeed(uint64_t seed) {
  return seed * 6364136223846793005ull + 1442695040888963407ull;
}

// Swaps the run's default-generator state in for the lifetime of the object
// and stores the advanced state back into `run_state` afterwards.
class ScopedRunGenerator {
 public:
  explicit ScopedRunGenerator(torch::Tensor& run_state)
      : run_state_(run_state), generator_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    process_state_ = generator_.get_state();
    generator_.set_state(run_state_);
  }
  ~ScopedRunGenerator() {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    run_state_ = generator_.get_state();
    generator_.set_state(process_state_);
  }
  ScopedRunGenerator(const ScopedRunGenerator&) = delete;
  ScopedRunGenerator& operator=(const ScopedRunGenerator&) = delete;

 private:
  torch::Tensor& run_state_;
  at::Generator generator_;
  torch::Tensor process_state_;
};

std::unique_ptr<torch::optim::AdamW> MakeOptimizer(models::PerformerLMImpl& model,
                                                   const TrainOptions& o) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const torch::Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  torch::optim::AdamWOptions defaults(o.lr);
  defaults.betas({o.beta1, o.beta2}).eps(o.adam_eps).weight_decay(o.weight_decay);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decay.empty()) {
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(defaults));
  }
  if (!no_decay.empty()) {
    torch::optim::AdamWOptions plain = defaults;
    plain.weight_decay(0.0);
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(plain));
  }
  return std::make_unique<torch::optim::AdamW>(std::move(groups), defaults);
}

// Mean (or summed) next-token cross-entropy of windows [b, n + 1].
torch::Tensor WindowLoss(models::PerformerLM& model, const torch::Tensor& windows,
                         torch::nn::functional::CrossEntropyFuncOptions::reduction_t reduction) {
  const int64_t n = windows.size(1) - 1;
  torch::Tensor logits = model->forward(windows.narrow(1, 0, n));
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}), windows.narrow(1, 1, n).reshape(-1),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(reduction));
}

}  // namespace

nlohmann::json ByteTokenizerJson() { return {{"type", "byte"}}; }

absl::StatusOr<models::PerformerLMConfig> Trainer::CheckSetup(nlohmann::json& model_config,
                                                              const TrainOptions& options,
                                                              const TextDataset& data) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (!model_config.is_object()) return absl::InvalidArgumentError("model config: not an object");
  model_config["model_class"] = "PerformerLM";
  absl::StatusOr<models::PerformerLMConfig> config = models::ParsePerformerLMConfig(model_config);
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model config: ", config.status().message()));
  }
  if (!config->causal) {
    return absl::InvalidArgumentError("model config: a language model is trained causal (causal)");
  }
  if (config->num_tokens != 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: byte-level training needs num_tokens 256, got ", config->num_tokens));
  }
  if (config->position_limit() < options.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("seq_len ", options.seq_len,
                                                   " exceeds the model's max_seq_len ",
                                                   config->position_limit()));
  }
  if (data.train().size(0) < options.seq_len + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the training part of the corpus holds ", data.train().size(0),
                     " tokens, fewer than one window of seq_len + 1 = ", options.seq_len + 1));
  }
  return config;
}

Trainer::Trainer(nlohmann::json model_config, const models::PerformerLMConfig& config,
                 const TrainOptions& options, TextDataset data)
    : model_config_(std::move(model_config)),
      options_(options),
      data_(std::move(data)),
      redraw_(config.auto_check_redraw ? std::optional<int64_t>(config.feature_redraw_interval)
                                       : std::nullopt),
      sampler_(data_.train(), SamplerSeed(options.seed)),
      rng_state_(at::make_generator<at::CPUGeneratorImpl>(options.seed).get_state()) {
  {
    // The same weights as performer-init-model --seed=<seed> writes.
    ScopedRunGenerator run(rng_state_);
    model_ = models::PerformerLM(config);
    models::InitializeLikeReference(*model_);
  }
  model_->train();
  optimizer_ = MakeOptimizer(*model_, options_);
}

Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(nlohmann::json model_config,
                                                         const TrainOptions& options,
                                                         TextDataset data) {
  absl::StatusOr<models::PerformerLMConfig> config = CheckSetup(model_config, options, data);
  if (!config.ok()) return config.status();
  return std::unique_ptr<Trainer>(
      new Trainer(std::move(model_config), *config, options, std::move(data)));
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Resume(const std::string& checkpoint,
                                                         const TrainOptions& options,
                                                         TextDataset data) {
  absl::StatusOr<TrainingState> stored = ReadTrainingState(checkpoint);
  if (!stored.ok()) return stored.status();
  absl::StatusOr<TrainOptions> stored_options = TrainOptions::FromJson(stored->options);
  if (!stored_options.ok()) return stored_options.status();
  if (absl::Status s = CheckResumable(*stored_options, options); !s.ok()) return s;
  if (stored->data_fingerprint != data.fingerprint()) {
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoint,
                     ": the corpus or its train/validation split differs from the "
                     "checkpoint's (same files and val_fraction are needed)"));
  }
  if (stored->step > options.steps) {
    return absl::InvalidArgumentError(absl::StrCat(checkpoint, ": the checkpoint is at step ",
                                                   stored->step, ", past steps ", options.steps));
  }
  nlohmann::json model_config = stored->model_config;
  absl::StatusOr<models::PerformerLMConfig> config = CheckSetup(model_config, options, data);
  if (!config.ok()) return config.status();
  std::unique_ptr<Trainer> trainer(
      new Trainer(std::move(model_config), *config, options, std::move(data)));
  absl::StatusOr<TrainingState> state =
      LoadCheckpoint(checkpoint, *trainer->model_, *trainer->optimizer_);
  if (!state.ok()) return state.status();
  trainer->step_ = state->step;
  trainer->redraw_.set_calls_since_last_redraw(state->calls_since_last_redraw);
  trainer->rng_state_ = state->rng_state;
  trainer->sampler_.Restore(state->sampler_state, state->sampler_batches);
  trainer->model_->train();
  return trainer;
}

StepReport Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  StepReport report;
  {
    ScopedRunGenerator run(rng_state_);
    model_->train();
    report.redrew = redraw_.BeforeTrainingForward(*model_);
    torch::Tensor windows = sampler_.Next(options_.batch_size, options_.seq_len + 1);
    torch::Tensor loss = WindowLoss(model_, windows, torch::kMean);
    optimizer_->zero_grad();
    loss.backward();
    const double limit =
        options_.clip_norm > 0.0 ? options_.clip_norm : std::numeric_limits<double>::infinity();
    report.grad_norm = torch::nn::utils::clip_grad_norm_(model_->parameters(), limit);
    report.lr = options_.Schedule().At(step_);
    for (torch::optim::OptimizerParamGroup& group : optimizer_->param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(report.lr);
    }
    optimizer_->step();
    report.loss = loss.item<double>();
  }
  ++step_;
  report.step = step_;
  report.total_steps = options_.steps;
  report.tokens = options_.batch_size * options_.seq_len;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

double Trainer::ValidationLoss() {
  torch::Tensor windows = data_.ValidationWindows(options_.seq_len + 1, options_.val_windows);
  const int64_t count = windows.size(0);
  if (count == 0) return std::numeric_limits<double>::quiet_NaN();
  torch::NoGradGuard no_grad;
  model_->eval();  // no dropout, no redraw count: nothing here draws random numbers
  double total = 0.0;
  for (int64_t begin = 0; begin < count; begin += options_.batch_size) {
    torch::Tensor chunk = windows.narrow(0, begin, std::min(options_.batch_size, count - begin));
    total += WindowLoss(model_, chunk, torch::kSum).item<double>();
  }
  model_->train();
  return total / static_cast<double>(count * options_.seq_len);
}

absl::Status Trainer::Run(TrainObserver* observer) {
  try {
    while (step_ < options_.steps) {
      const StepReport report = Step();
      if (observer != nullptr) observer->OnStep(report);
      if (!std::isfinite(report.loss)) {
        return absl::InternalError(absl::StrCat("the loss is not finite at step ", step_,
                                                "; a lower learning rate may help"));
      }
      const bool last = step_ == options_.steps;
      if (options_.val_every > 0 && (step_ % options_.val_every == 0 || last)) {
        const double loss = ValidationLoss();
        if (observer != nullptr && !std::isnan(loss)) observer->OnValidation(step_, loss);
      }
      if (!options_.checkpoint_dir.empty() && options_.checkpoint_every > 0 &&
          (step_ % options_.checkpoint_every == 0 || last)) {
        const std::string path = CheckpointPath(options_.checkpoint_dir, step_);
        if (absl::Status s = SaveCheckpoint(path); !s.ok()) return s;
        if (observer != nullptr) observer->OnCheckpoint(step_, path);
      }
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("training step ", step_ + 1, ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status Trainer::SaveCheckpoint(const std::string& path) const {
  TrainingState state;
  state.step = step_;
  state.model_config = model_config_;
  state.options = options_.ToJson();
  state.data_fingerprint = data_.fingerprint();
  state.calls_since_last_redraw = redraw_.calls_since_last_redraw();
  state.rng_state = rng_state_;
  state.sampler_state = sampler_.GeneratorState();
  state.sampler_batches = sampler_.batches_drawn();
  return training::SaveCheckpoint(path, state, *model_, *optimizer_);
}

absl::StatusOr<models::LoadedModel> Trainer::Export(const std::string& dir,
                                                    torch::ScalarType dtype) const {
  models::ModelFolderWriteOptions options;
  options.dtype = dtype;
  options.tokenizer = ByteTokenizerJson();
  options.metadata = {{"producer", "performer-train"}, {"step", absl::StrCat(step_)}};
  return models::WriteModelFolder(dir, model_config_, *model_, options);
}

}  // namespace performer::training
