#include "server/tokenizer/sentencepiece_model.h"

// No Abseil header may be included here (see the header comment).
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace performer::server {

struct SentencePieceModel::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SentencePieceModel::SentencePieceModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path,
                                                             std::string* error) {
  auto impl = std::make_unique<Impl>();
  const auto status = impl->processor.Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(new SentencePieceModel(std::move(impl)));
}

int SentencePieceModel::vocab_size() const { return impl_->processor.GetPieceSize(); }

bool SentencePieceModel::Encode(std::string_view text, std::vector<int>* ids,
                                std::string* error) const {
  const auto status = impl_->processor.Encode(text, ids);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

std::string SentencePieceModel::Decode(const std::vector<int>& ids) const {
  std::string out;
  if (!impl_->processor.Decode(ids, &out).ok()) return "";
  return out;
}

std::string TrainSentencePieceModel(const std::string& options) {
  const auto status = sentencepiece::SentencePieceTrainer::Train(options);
  return status.ok() ? "" : status.ToString();
}

}  // namespace performer::server
