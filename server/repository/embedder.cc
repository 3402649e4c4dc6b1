#include "server/repository/embedder.h"

#include <torch/torch.h>

#include <future>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/decoding/status_from_exception.h"
#include "core/decoding/token_ids.h"
#include "core/models/model_folder.h"
#include "server/engine/compute_thread.h"
#include "server/engine/thread_name.h"

namespace performer::server {

Embedder::Embedder(const models::LoadedModel& model, EmbedderOptions options)
    : model_(std::make_unique<models::LoadedModel>(model)), options_(options) {
  const models::PerformerLMConfig& config =
      model_->lm ? model_->lm->config() : model_->encdec->config().enc;
  vocab_size_ = config.num_tokens;
  max_tokens_ = config.position_limit();
  thread_ = std::thread([this] {
    NameThisThread("embedder");
    Loop();
  });
}

Embedder::~Embedder() {
  std::deque<Pending> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  left.swap(queue_);
  for (Pending& p : left) {
    p.done(absl::UnavailableError("the server shut down before the embedding was computed"));
  }
}

void Embedder::EmbedAsync(std::vector<int64_t> tokens, bool mean_pool, Done done) {
  if (tokens.empty()) return done(absl::InvalidArgumentError("text / tokens: the input is empty"));
  if (static_cast<int64_t>(tokens.size()) > max_tokens_) {
    return done(absl::InvalidArgumentError(absl::StrCat("tokens: the input has ", tokens.size(),
                                                        " tokens; the model's max_seq_len is ",
                                                        max_tokens_)));
  }
  if (absl::Status s = decoding::CheckTokenIds(tokens, vocab_size_, "tokens"); !s.ok()) {
    return done(s);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_ && static_cast<int64_t>(queue_.size()) < options_.max_queue) {
      queue_.push_back({std::move(tokens), mean_pool, std::move(done)});
      wake_.notify_one();
      return;
    }
  }
  done(absl::ResourceExhaustedError(absl::StrCat("Embed is overloaded: ", options_.max_queue,
                                                 " requests are waiting; retry later")));
}

absl::StatusOr<Embedding> Embedder::Embed(const std::vector<int64_t>& tokens, bool mean_pool) {
  auto result = std::make_shared<std::promise<absl::StatusOr<Embedding>>>();
  std::future<absl::StatusOr<Embedding>> future = result->get_future();
  EmbedAsync(tokens, mean_pool, [result](absl::StatusOr<Embedding> embedding) {
    result->set_value(std::move(embedding));
  });
  return future.get();
}

void Embedder::Loop() {
  while (true) {
    std::vector<Pending> taken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      while (!queue_.empty() && static_cast<int64_t>(taken.size()) < options_.max_batch) {
        taken.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    // One forward per input length.
    std::map<size_t, std::vector<Pending>> by_length;
    for (Pending& p : taken) by_length[p.tokens.size()].push_back(std::move(p));
    // The forwards run on the process's compute thread (compute_thread.h).
    RunOnComputeThread([&] {
      c10::InferenceMode inference;
      for (auto& [length, batch] : by_length) RunBatch(batch);
    });
  }
}

void Embedder::RunBatch(std::vector<Pending>& batch) {
  const int64_t rows = static_cast<int64_t>(batch.size());
  const int64_t length = static_cast<int64_t>(batch[0].tokens.size());
  absl::StatusOr<torch::Tensor> encodings = decoding::StatusFromException("embedding", [&] {
    std::vector<int64_t> flat;
    flat.reserve(static_cast<size_t>(rows * length));
    for (const Pending& p : batch) flat.insert(flat.end(), p.tokens.begin(), p.tokens.end());
    torch::Tensor input =
        torch::tensor(flat, torch::TensorOptions().dtype(torch::kLong)).reshape({rows, length});
    // The weights may live on a GPU (--device): the input goes there, the
    // encodings come back.
    const torch::Device device =
        (model_->lm ? model_->lm->parameters() : model_->encdec->parameters()).front().device();
    if (!device.is_cpu()) input = input.to(device);
    torch::Tensor out;
    if (model_->lm) {
      models::LMForwardOptions options;
      options.return_encodings = true;
      out = model_->lm->forward(input, options);
    } else {
      out = model_->encdec->Encode(input);
    }
    return absl::StatusOr<torch::Tensor>(out.to(torch::kFloat).to(torch::kCPU));  // [rows, n, dim]
  });
  for (int64_t r = 0; r < rows; ++r) {
    Pending& p = batch[static_cast<size_t>(r)];
    if (!encodings.ok()) {
      p.done(encodings.status());
      continue;
    }
    torch::Tensor row = (*encodings)[r];  // [n, dim]
    Embedding out;
    out.dim = row.size(1);
    out.tokens = row.size(0);
    if (p.mean_pool) row = row.mean(0);
    row = row.contiguous();
    out.values.assign(row.data_ptr<float>(), row.data_ptr<float>() + row.numel());
    p.done(std::move(out));
  }
}

}  // namespace performer::server
