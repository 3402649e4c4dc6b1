// libperformer_sentencepiece.so: the only code that touches libsentencepiece
// (see sentencepiece_model.h for why it lives in its own link namespace).
// Its entry points are plain C: nothing allocated on one side of the
// namespace boundary is ever freed on the other (each side has its own C
// and C++ runtime), so results are copied into the caller's buffers.
// No Abseil header may be included here.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace {

void CopyError(const std::string& message, char* error, size_t capacity) {
  if (capacity == 0) return;
  const size_t n = std::min(message.size(), capacity - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

}  // namespace

#define PERFORMER_SPM_EXPORT extern "C" __attribute__((visibility("default")))

PERFORMER_SPM_EXPORT void* PerformerSpmLoad(const char* path, char* error, size_t error_capacity) {
  auto* processor = new sentencepiece::SentencePieceProcessor();
  const auto status = processor->Load(path);
  if (!status.ok()) {
    CopyError(status.ToString(), error, error_capacity);
    delete processor;
    return nullptr;
  }
  return processor;
}

PERFORMER_SPM_EXPORT void PerformerSpmFree(void* handle) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(handle);
}

PERFORMER_SPM_EXPORT int PerformerSpmVocabSize(void* handle) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->GetPieceSize();
}

// Returns the number of ids (written only when it fits `capacity`; call
// again with a larger buffer otherwise), or -1 with the error set.
PERFORMER_SPM_EXPORT long PerformerSpmEncode(void* handle, const char* text, size_t length,
                                             int* ids, size_t capacity, char* error,
                                             size_t error_capacity) {
  std::vector<int> out;
  const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Encode(
      std::string_view(text, length), &out);
  if (!status.ok()) {
    CopyError(status.ToString(), error, error_capacity);
    return -1;
  }
  if (out.size() <= capacity) std::copy(out.begin(), out.end(), ids);
  return static_cast<long>(out.size());
}

// Returns the text's length (written only when it fits `capacity`), or -1.
PERFORMER_SPM_EXPORT long PerformerSpmDecode(void* handle, const int* ids, size_t count, char* text,
                                             size_t capacity) {
  std::string out;
  const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Decode(
      std::vector<int>(ids, ids + count), &out);
  if (!status.ok()) return -1;
  if (out.size() <= capacity) std::memcpy(text, out.data(), out.size());
  return static_cast<long>(out.size());
}

// 0 on success, else -1 with the error set.
PERFORMER_SPM_EXPORT int PerformerSpmTrain(const char* options, char* error,
                                           size_t error_capacity) {
  const auto status = sentencepiece::SentencePieceTrainer::Train(options);
  if (!status.ok()) {
    CopyError(status.ToString(), error, error_capacity);
    return -1;
  }
  return 0;
}
