#include "server/repository/embedder.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "core/decoding/token_ids.h"
#include "core/models/model_folder.h"

namespace performer::server {

Embedder::Embedder(const models::LoadedModel& model)
    : model_(std::make_unique<models::LoadedModel>(model)) {
  const models::PerformerLMConfig& config =
      model_->lm ? model_->lm->config() : model_->encdec->config().enc;
  vocab_size_ = config.num_tokens;
  max_tokens_ = config.position_limit();
}

Embedder::~Embedder() = default;

absl::StatusOr<Embedding> Embedder::Embed(const std::vector<int64_t>& tokens, bool mean_pool) {
  if (tokens.empty()) return absl::InvalidArgumentError("text / tokens: the input is empty");
  if (static_cast<int64_t>(tokens.size()) > max_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat("tokens: the input has ", tokens.size(),
                                                   " tokens; the model's max_seq_len is ",
                                                   max_tokens_));
  }
  if (absl::Status s = decoding::CheckTokenIds(tokens, vocab_size_, "tokens"); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  c10::InferenceMode guard;
  torch::Tensor input =
      torch::tensor(tokens, torch::TensorOptions().dtype(torch::kLong)).unsqueeze(0);
  torch::Tensor encodings;
  // The weights may live on a GPU (--device): the input goes there, the
  // encodings come back.
  const torch::Device device =
      (model_->lm ? model_->lm->parameters() : model_->encdec->parameters()).front().device();
  if (!device.is_cpu()) input = input.to(device);
  if (model_->lm) {
    models::LMForwardOptions options;
    options.return_encodings = true;
    encodings = model_->lm->forward(input, options);
  } else {
    encodings = model_->encdec->Encode(input);
  }
  encodings = encodings[0].to(torch::kFloat).to(torch::kCPU);  // [n, dim]
  Embedding out;
  out.dim = encodings.size(1);
  out.tokens = encodings.size(0);
  if (mean_pool) encodings = encodings.mean(0);
  encodings = encodings.contiguous();
  out.values.assign(encodings.data_ptr<float>(), encodings.data_ptr<float>() + encodings.numel());
  return out;
}

}  // namespace performer::server
