// libperformer_sentencepiece.so: the only code that touches libsentencepiece
// (see sentencepiece_model.h for why it is a dlopen'ed plugin).
// No Abseil header may be included here.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "server/tokenizer/sentencepiece_model.h"

namespace performer::server {
namespace {

class ProcessorModel : public SentencePieceModel {
 public:
  bool Load(const std::string& path, std::string* error) {
    const auto status = processor_.Load(path);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }
  int vocab_size() const override { return processor_.GetPieceSize(); }
  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const override {
    const auto status = processor_.Encode(text, ids);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }
  std::string Decode(const std::vector<int>& ids) const override {
    std::string out;
    if (!processor_.Decode(ids, &out).ok()) return "";
    return out;
  }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace
}  // namespace performer::server

// The plugin's entry points, found with dlsym.
extern "C" __attribute__((visibility("default"))) performer::server::SentencePieceModel*
PerformerSentencePieceLoad(const std::string& path, std::string* error) {
  auto model = std::make_unique<performer::server::ProcessorModel>();
  if (!model->Load(path, error)) return nullptr;
  return model.release();
}

extern "C" __attribute__((visibility("default"))) void PerformerSentencePieceTrain(
    const std::string& options, std::string* error) {
  const auto status = sentencepiece::SentencePieceTrainer::Train(options);
  *error = status.ok() ? "" : status.ToString();
}
