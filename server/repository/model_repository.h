// The models a server hosts: every sub-folder of the repository directory
// that holds config.json + weights.safetensors is a model named after the
// folder (other files are ignored, so a fixture folder is a valid model).
// Each decoder or encoder-decoder model gets its own Engine; a bidirectional
// PerformerLM is hosted for Embed only; folders of other model classes
// (FastAttention) are skipped with a warning.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/models/decode_step_options.h"
#include "server/engine/engine.h"
#include "server/repository/chat_template.h"
#include "server/repository/generation_config.h"
#include "server/tokenizer/tokenizer.h"

namespace performer::server {

enum class ModelKind { kDecoder, kEncoderDecoder, kEncoder };
std::string_view ModelKindName(ModelKind kind);

class Embedder;  // server/repository/embedder.h

struct RepositoryOptions {
  // Per model: slots = min(state_memory_bytes / state bytes per sequence, max_batch).
  int64_t state_memory_bytes = int64_t{1} << 30;
  // Per model, when positive: the bytes its weights (in the dtype it is
  // served in, DecoderInfo::weight_bytes) and its state pool may take
  // together; slots are also at most (this - weight bytes) / state bytes per
  // sequence, and a model whose weights leave no room for one sequence
  // fails to load.
  int64_t model_memory_bytes = 0;
  int64_t max_batch = 64;
  // Where the weights, the state pools and the decode steps live: "cpu" or
  // "cuda[:N]" (needs a LibTorch with CUDA; main.cc checks that first).
  std::string device = "cpu";
  // How each model's decode step computes (--weight_dtype;
  // core/models/decode_step_options.h).
  models::DecodeStepOptions decode_step;
  EngineOptions engine;
  // A model folder that fails to load: false = Load fails naming it (the
  // server refuses to start); true = the failure is logged and recorded
  // (ModelRepository::failed_models) and the other models are served.
  bool skip_bad_models = false;
  // TEST HOOK: sleep this long before loading each model folder (keeps a
  // server in its loading phase, for tests of signals during loading).
  absl::Duration test_load_delay = absl::ZeroDuration();
  // The observer each model's engine reports to (e.g. its metrics); null or
  // returning null = none.
  std::function<EngineObserver*(const std::string& model)> observer_for_model;
};

// OK when models can be served on `device` ("cpu", "cuda", "cuda:N");
// InvalidArgument for a name LibTorch does not know or a device other than
// those, FailedPrecondition when this LibTorch has no CUDA or the GPU is
// not there (the message says which).
absl::Status CheckServingDevice(const std::string& device);

struct HostedModel {
  std::string name;
  std::string dir;
  ModelKind kind = ModelKind::kDecoder;
  int64_t vocab_size = 0;
  int64_t max_sequence_length = 0;
  std::unique_ptr<Tokenizer> tokenizer;  // null: token ids only
  GenerationConfig generation;
  std::optional<ChatTemplate> chat_template;  // chat_template.json; none = no chat
  std::unique_ptr<Engine> engine;      // decoder / encoder-decoder
  std::unique_ptr<Embedder> embedder;  // encoder / encoder-decoder (its encoder)
  double load_seconds = 0;
  ~HostedModel();
  HostedModel();
  HostedModel(HostedModel&&) noexcept;
};

class ModelRepository {
 public:
  // Loads every model under `dir`; starts their engines. A folder that looks
  // like a model but fails to load (whatever it holds: loading never throws
  // or aborts) is an error naming it, unless options.skip_bad_models, which
  // logs and records it instead. NOT_FOUND when dir is missing,
  // FAILED_PRECONDITION when it holds no servable model (every failure
  // named in the message).
  static absl::StatusOr<std::unique_ptr<ModelRepository>> Load(const std::string& dir,
                                                               const RepositoryOptions& options,
                                                               std::string default_model = "");

  // Hosts models built elsewhere (an embedding program, tests with a model of
  // their own); the default is `default_model`, or the first generating
  // model. INVALID_ARGUMENT for no model or an unknown default.
  static absl::StatusOr<std::unique_ptr<ModelRepository>> FromModels(
      std::vector<std::unique_ptr<HostedModel>> models, std::string default_model = "");

  // Empty name = the default model. nullptr when unknown.
  HostedModel* Find(const std::string& name);
  const std::vector<std::unique_ptr<HostedModel>>& models() const { return models_; }
  const std::string& default_model() const { return default_model_; }
  // What one request may carry, as the engines check it
  // (RepositoryOptions::engine.request_bounds; for FromModels, the first
  // engine's, or the defaults without one). The service checks what it
  // handles before a request reaches an engine against these.
  const RequestBounds& request_bounds() const { return request_bounds_; }

  // The folders skipped under RepositoryOptions::skip_bad_models.
  struct FailedModel {
    std::string name;
    std::string dir;
    absl::Status status;
  };
  const std::vector<FailedModel>& failed_models() const { return failed_models_; }

  // The drain's one owner: from BeginDrain on, every service refuses new
  // work with DrainingError (server/engine/draining.h) and every engine
  // refuses new requests; running and queued ones go on.
  void BeginDrain();
  bool draining() const { return draining_.load(); }
  bool WaitIdle(absl::Duration timeout);
  void Stop();

 private:
  // The first generating model, else the first.
  std::string FirstGeneratingModel() const;

  std::vector<std::unique_ptr<HostedModel>> models_;
  std::string default_model_;
  RequestBounds request_bounds_;
  std::vector<FailedModel> failed_models_;
  std::atomic<bool> draining_{false};
};

}  // namespace performer::server
