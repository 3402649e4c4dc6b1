#include "server/repository/model_repository.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/decoding/decoder_factory.h"
#include "core/decoding/state_encoding.h"
#include "core/models/model_class.h"
#include "core/models/model_folder.h"
#include "kernels/kernels_info.h"
#include "server/engine/compute_thread.h"
#include "server/logging/server_log.h"
#include "server/repository/embedder.h"

namespace performer::server {
namespace {

namespace fs = std::filesystem;

// One prefill and one step, so the first real request does not pay for
// lazy allocations and kernel selection.
absl::Status WarmUp(decoding::SequenceDecoder& decoder) {
  absl::StatusOr<decoding::SequenceId> id = decoder.Create();
  if (!id.ok()) return id.status();
  decoding::PrefillRequest request;
  request.prompt = {0};
  if (decoder.info().needs_source) request.source = {0};
  absl::Status status = decoder.Prefill(*id, request).status();
  if (status.ok()) status = decoder.Step({*id}, {0}).status();
  absl::Status released = decoder.Release(*id);
  return status.ok() ? released : status;
}

absl::StatusOr<std::unique_ptr<HostedModel>> LoadOneHere(const fs::path& dir,
                                                         const RepositoryOptions& options);

// Loading and warm-up run on the compute thread, like all model work
// (server/engine/compute_thread.h). The loaders report errors as statuses;
// an exception that still escapes (LibTorch, an allocation) is one too, so
// that no model folder can end the process.
absl::StatusOr<std::unique_ptr<HostedModel>> LoadOne(const fs::path& dir,
                                                     const RepositoryOptions& options) {
  try {
    return RunOnComputeThread([&] { return LoadOneHere(dir, options); });
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("loading failed: ", e.what()));
  }
}

// What a session's state is bound to: the model's name, its config.json as
// read and its weights file's bytes.
decoding::ModelFingerprint Fingerprint(const std::string& name, const models::LoadedModel& model) {
  decoding::ModelFingerprint fingerprint;
  fingerprint.model = name;
  fingerprint.config_hash = decoding::HexDigest(decoding::Fnv1a64(model.config.dump()));
  std::ifstream weights(fs::path(model.dir) / "weights.safetensors", std::ios::binary);
  uint64_t hash = decoding::Fnv1a64("");
  std::vector<char> buffer(1 << 20);
  while (weights) {
    weights.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hash = decoding::Fnv1a64(std::string_view(buffer.data(), static_cast<size_t>(weights.gcount())),
                             hash);
  }
  fingerprint.weights_hash = decoding::HexDigest(hash);
  return fingerprint;
}

// How a model of this class is hosted; nullopt for a class that is not
// (FastAttention, a layer rather than a model).
std::optional<ModelKind> HostedKind(const models::LoadedModel& model) {
  switch (model.model_class) {
    case models::ModelClass::kPerformerLM:
      return model.lm->config().causal ? ModelKind::kDecoder : ModelKind::kEncoder;
    case models::ModelClass::kPerformerEncDec:
      return ModelKind::kEncoderDecoder;
    case models::ModelClass::kFastTransformersLM:
      return ModelKind::kDecoder;
    case models::ModelClass::kFastAttention:
      return std::nullopt;
  }
  return std::nullopt;
}

// The folder's tokenizer (if any), generation defaults and chat template.
absl::Status LoadTextSupport(const fs::path& dir, HostedModel& hosted) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir.string());
  if (!tokenizer.ok()) return tokenizer.status();
  hosted.tokenizer = std::move(*tokenizer);
  absl::StatusOr<GenerationConfig> generation = LoadGenerationConfig(dir.string());
  if (!generation.ok()) return generation.status();
  hosted.generation = *generation;
  absl::StatusOr<std::optional<ChatTemplate>> chat = LoadChatTemplate(dir.string());
  if (!chat.ok()) return chat.status();
  hosted.chat_template = std::move(*chat);
  return absl::OkStatus();
}

// A bidirectional PerformerLM, hosted for Embed only.
absl::Status HostEncoder(const models::LoadedModel& model, const RepositoryOptions& options,
                         HostedModel& hosted) {
  if (absl::Status s = decoding::ServeWeightsIn(model, options.decode_step); !s.ok()) return s;
  hosted.vocab_size = model.lm->config().num_tokens;
  hosted.max_sequence_length = model.lm->config().position_limit();
  if (absl::Status s = ValidateGenerationConfig(hosted.generation, hosted.vocab_size, hosted.dir);
      !s.ok()) {
    return s;
  }
  hosted.embedder = std::make_unique<Embedder>(model);
  return absl::OkStatus();
}

// State slots: as many sequences as --state_memory_bytes holds at the
// model's exact state size, at most --max_batch.
absl::StatusOr<int64_t> Slots(const std::string& name, const models::LoadedModel& model,
                              const RepositoryOptions& options) {
  absl::StatusOr<int64_t> bytes = decoding::StateBytesPerSequence(model);
  if (!bytes.ok()) return bytes.status();
  const int64_t slots = std::min<int64_t>(
      options.max_batch, options.state_memory_bytes / std::max<int64_t>(1, *bytes));
  if (slots < 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": one sequence needs ", *bytes,
                                                   " state bytes but --state_memory_bytes is ",
                                                   options.state_memory_bytes));
  }
  return slots;
}

// With --model_memory_bytes: the slots that fit beside the model's weights in
// their served dtype. A decoder of one slot converts the weights (in place,
// so the real decoder finds them converted) and counts them.
absl::StatusOr<int64_t> SlotsBesideWeights(const std::string& name,
                                           const models::LoadedModel& model, int64_t slots,
                                           const RepositoryOptions& options) {
  if (options.model_memory_bytes <= 0) return slots;
  absl::StatusOr<std::unique_ptr<decoding::SequenceDecoder>> probe =
      decoding::CreateDecoder(model, 1, options.decode_step);
  if (!probe.ok()) return probe.status();
  const decoding::DecoderInfo& info = (*probe)->info();
  const int64_t room = options.model_memory_bytes - info.weight_bytes;
  const int64_t fit = room / std::max<int64_t>(1, info.state_bytes_per_sequence);
  if (fit < 1) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name, ": its weights take ", info.weight_bytes, " bytes in ",
                     info.weight_dtype, " and one sequence ", info.state_bytes_per_sequence,
                     " state bytes, more than --model_memory_bytes=", options.model_memory_bytes,
                     " (a smaller --weight_dtype shrinks the weights)"));
  }
  return std::min(slots, fit);
}

// The model's decoder over `slots` state slots, warmed up.
absl::StatusOr<std::unique_ptr<decoding::SequenceDecoder>> WarmDecoder(
    const std::string& name, const models::LoadedModel& model, int64_t slots,
    const models::DecodeStepOptions& step) {
  absl::Status speedups;
  absl::StatusOr<std::unique_ptr<decoding::SequenceDecoder>> decoder =
      decoding::CreateDecoder(model, slots, step, &speedups);
  if (!decoder.ok()) return decoder.status();
  if (!speedups.ok()) {
    LogEvent(spdlog::level::warn, "CUDA graphs unavailable: decode steps run eagerly",
             {{"model", name}, {"reason", std::string(speedups.message())}});
  }
  const absl::Time warmup_start = absl::Now();
  if (absl::Status s = WarmUp(**decoder); !s.ok()) {
    return absl::InternalError(absl::StrCat(name, ": warm-up failed: ", s.ToString()));
  }
  LogEngineEvent("warmup", name, {{"seconds", absl::ToDoubleSeconds(absl::Now() - warmup_start)}});
  return decoder;
}

// The repository's engine options, made this model's.
EngineOptions ModelEngineOptions(const std::string& name, const models::LoadedModel& model,
                                 const decoding::DecoderInfo& info,
                                 const RepositoryOptions& options) {
  EngineOptions engine = options.engine;
  // On a GPU a batch of short prompts costs about one forward's kernel
  // launches; on a CPU each prompt's arithmetic.
  engine.batched_prefill_is_one_forward = options.device != "cpu";
  engine.sessions.fingerprint = Fingerprint(name, model);
  engine.sessions.max_state_bytes = 2 * info.state_bytes_per_sequence;
  if (options.observer_for_model) engine.observer = options.observer_for_model(name);
  return engine;
}

// A decoder or an encoder-decoder: its engine (and the encoder-decoder's
// embedder).
absl::Status HostDecoder(const models::LoadedModel& model, const RepositoryOptions& options,
                         HostedModel& hosted) {
  if (hosted.kind == ModelKind::kEncoderDecoder)
    hosted.embedder = std::make_unique<Embedder>(model);
  absl::StatusOr<int64_t> slots = Slots(hosted.name, model, options);
  if (!slots.ok()) return slots.status();
  slots = SlotsBesideWeights(hosted.name, model, *slots, options);
  if (!slots.ok()) return slots.status();
  absl::StatusOr<std::unique_ptr<decoding::SequenceDecoder>> decoder =
      WarmDecoder(hosted.name, model, *slots, options.decode_step);
  if (!decoder.ok()) return decoder.status();
  hosted.vocab_size = (*decoder)->info().vocab_size;
  hosted.max_sequence_length = (*decoder)->info().max_seq_len;
  if (absl::Status s = ValidateGenerationConfig(hosted.generation, hosted.vocab_size, hosted.dir);
      !s.ok()) {
    return s;
  }
  const EngineOptions engine = ModelEngineOptions(hosted.name, model, (*decoder)->info(), options);
  hosted.engine =
      std::make_unique<Engine>(hosted.name, std::move(*decoder), hosted.tokenizer.get(), engine);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HostedModel>> LoadOneHere(const fs::path& dir,
                                                         const RepositoryOptions& options) {
  const absl::Time start = absl::Now();
  auto hosted = std::make_unique<HostedModel>();
  hosted->name = dir.filename().string();
  hosted->dir = dir.string();
  absl::StatusOr<models::LoadedModel> model = models::LoadModelFolder(dir.string());
  if (!model.ok()) return model.status();
  const std::optional<ModelKind> kind = HostedKind(*model);
  if (!kind.has_value()) return std::unique_ptr<HostedModel>();
  hosted->kind = *kind;
  if (options.device != "cpu") model->MoveTo(torch::Device(options.device));
  if (absl::Status s = LoadTextSupport(dir, *hosted); !s.ok()) return s;
  if (absl::Status s = hosted->kind == ModelKind::kEncoder ? HostEncoder(*model, options, *hosted)
                                                           : HostDecoder(*model, options, *hosted);
      !s.ok()) {
    return s;
  }
  hosted->load_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return hosted;
}

}  // namespace

absl::Status CheckServingDevice(const std::string& device) {
  std::optional<torch::Device> parsed;
  try {
    parsed.emplace(device);
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device, ": not a device name (cpu, cuda or cuda:N)"));
  }
  if (parsed->is_cpu()) return absl::OkStatus();
  if (!parsed->is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device, ": only cpu and cuda[:N] are supported"));
  }
  if (!kernels::TorchHasCuda()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=", device,
        ": this build's LibTorch has no CUDA (Debian's libtorch is CPU-only); build against a "
        "CUDA LibTorch (docs/gpu.md)"));
  }
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=", device, ": no CUDA device is visible"));
  }
  if (parsed->has_index() && parsed->index() >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=", device, ": only ", count, " CUDA device(s) are visible"));
  }
  return absl::OkStatus();
}

std::string_view ModelKindName(ModelKind kind) {
  switch (kind) {
    case ModelKind::kDecoder:
      return "decoder";
    case ModelKind::kEncoderDecoder:
      return "encoder-decoder";
    case ModelKind::kEncoder:
      return "encoder";
  }
  return "unknown";
}

HostedModel::HostedModel() = default;
HostedModel::~HostedModel() = default;
HostedModel::HostedModel(HostedModel&&) noexcept = default;

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::Load(
    const std::string& dir, const RepositoryOptions& options, std::string default_model) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    return absl::NotFoundError(absl::StrCat("model repository ", dir, " is not a directory"));
  }
  std::vector<fs::path> folders;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const fs::path& p = entry.path();
    if (fs::is_directory(p) && fs::exists(p / "config.json") &&
        fs::exists(p / "weights.safetensors")) {
      folders.push_back(p);
    }
  }
  std::sort(folders.begin(), folders.end());
  auto repository = std::unique_ptr<ModelRepository>(new ModelRepository());
  for (const fs::path& folder : folders) {
    if (options.test_load_delay > absl::ZeroDuration()) absl::SleepFor(options.test_load_delay);
    absl::StatusOr<std::unique_ptr<HostedModel>> model = LoadOne(folder, options);
    if (!model.ok()) {
      absl::Status status(model.status().code(),
                          absl::StrCat("model ", folder.string(), ": ", model.status().message()));
      if (!options.skip_bad_models) return status;
      LogEvent(spdlog::level::err, "model failed to load: skipped (--skip_bad_models)",
               {{"model", folder.filename().string()}, {"error", status.ToString()}});
      repository->failed_models_.push_back(
          {folder.filename().string(), folder.string(), std::move(status)});
      continue;
    }
    if (*model == nullptr) {
      LogEvent(spdlog::level::warn, "skipping a bare FastAttention layer: not a servable model",
               {{"folder", folder.string()}});
      continue;
    }
    LogFields fields = {{"kind", ModelKindName((*model)->kind)},
                        {"vocab", (*model)->vocab_size},
                        {"max_length", (*model)->max_sequence_length}};
    if ((*model)->engine) {
      fields.push_back(
          {"state_bytes_per_sequence", (*model)->engine->info().state_bytes_per_sequence});
      fields.push_back({"slots", (*model)->engine->info().capacity});
      fields.push_back({"cuda_graphs", (*model)->engine->info().cuda_graphs});
      fields.push_back({"weight_dtype", (*model)->engine->info().weight_dtype});
      fields.push_back({"weight_bytes", (*model)->engine->info().weight_bytes});
    }
    fields.push_back({"load_seconds", (*model)->load_seconds});
    LogEngineEvent("load", (*model)->name, fields);
    repository->models_.push_back(std::move(*model));
  }
  if (repository->models_.empty()) {
    std::string failures;
    for (const FailedModel& failed : repository->failed_models_) {
      absl::StrAppend(&failures, "; ", failed.status.message());
    }
    return absl::FailedPreconditionError(
        absl::StrCat("model repository ", dir,
                     " holds no servable model (sub-folders with config.json and "
                     "weights.safetensors)",
                     repository->failed_models_.empty()
                         ? ""
                         : absl::StrCat(": ", repository->failed_models_.size(), " failed to load"),
                     failures));
  }
  if (default_model.empty()) {
    default_model = repository->FirstGeneratingModel();
  } else if (repository->Find(default_model) == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("--default_model ", default_model, " is not in the repository ", dir));
  }
  repository->default_model_ = default_model;
  repository->request_bounds_ = options.engine.request_bounds;
  return repository;
}

std::string ModelRepository::FirstGeneratingModel() const {
  for (const auto& m : models_) {
    if (m->engine) return m->name;
  }
  return models_.front()->name;
}

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::FromModels(
    std::vector<std::unique_ptr<HostedModel>> models, std::string default_model) {
  if (models.empty()) return absl::InvalidArgumentError("a model repository needs a model");
  auto repository = std::unique_ptr<ModelRepository>(new ModelRepository());
  repository->models_ = std::move(models);
  if (default_model.empty()) default_model = repository->FirstGeneratingModel();
  if (repository->Find(default_model) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("default model ", default_model, " is not among the models"));
  }
  repository->default_model_ = std::move(default_model);
  for (const auto& m : repository->models_) {
    if (m->engine) {
      repository->request_bounds_ = m->engine->limits().bounds;
      break;
    }
  }
  return repository;
}

HostedModel* ModelRepository::Find(const std::string& name) {
  const std::string& wanted = name.empty() ? default_model_ : name;
  for (auto& m : models_) {
    if (m->name == wanted) return m.get();
  }
  return nullptr;
}

void ModelRepository::BeginDrain() {
  draining_.store(true);
  for (auto& m : models_) {
    if (m->engine == nullptr) continue;
    const EngineStats stats = m->engine->Stats();
    LogEngineEvent("drain", m->name, {{"active", stats.active}, {"queued", stats.queued}});
    m->engine->BeginDrain();
  }
}

bool ModelRepository::WaitIdle(absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  bool idle = true;
  for (auto& m : models_) {
    if (m->engine)
      idle = m->engine->WaitIdle(std::max(absl::ZeroDuration(), until - absl::Now())) && idle;
  }
  return idle;
}

void ModelRepository::Stop() {
  for (auto& m : models_) {
    if (m->engine == nullptr) continue;
    m->engine->Stop();
    LogEngineEvent("stopped", m->name);
  }
}

}  // namespace performer::server
