#include "server/tokenizer/sentencepiece_model.h"

#include <dlfcn.h>

#ifndef PERFORMER_SENTENCEPIECE_PLUGIN
#define PERFORMER_SENTENCEPIECE_PLUGIN "libperformer_sentencepiece.so"
#endif

namespace performer::server {
namespace {

struct Plugin {
  void* (*load)(const char*, char*, size_t) = nullptr;
  void (*free)(void*) = nullptr;
  int (*vocab_size)(void*) = nullptr;
  long (*encode)(void*, const char*, size_t, int*, size_t, char*, size_t) = nullptr;
  long (*decode)(void*, const int*, size_t, char*, size_t) = nullptr;
  int (*train)(const char*, char*, size_t) = nullptr;
  std::string error;
};

template <typename Fn>
bool Find(void* handle, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  return *fn != nullptr;
}

// Loaded once, into a new link namespace: the build tree's copy first, then
// the library search path (an installed server keeps it with its libraries).
const Plugin& GetPlugin() {
  static const Plugin* plugin = [] {
    auto* p = new Plugin();
    void* handle = dlmopen(LM_ID_NEWLM, PERFORMER_SENTENCEPIECE_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      handle = dlmopen(LM_ID_NEWLM, "libperformer_sentencepiece.so", RTLD_NOW | RTLD_LOCAL);
    }
    if (handle == nullptr) {
      const char* why = dlerror();
      p->error = std::string("cannot load the SentencePiece plugin: ") + (why ? why : "unknown");
      return p;
    }
    if (!Find(handle, "PerformerSpmLoad", &p->load) ||
        !Find(handle, "PerformerSpmFree", &p->free) ||
        !Find(handle, "PerformerSpmVocabSize", &p->vocab_size) ||
        !Find(handle, "PerformerSpmEncode", &p->encode) ||
        !Find(handle, "PerformerSpmDecode", &p->decode) ||
        !Find(handle, "PerformerSpmTrain", &p->train)) {
      p->error = "the SentencePiece plugin lacks its entry points";
      p->load = nullptr;
      p->train = nullptr;
    }
    return p;
  }();
  return *plugin;
}

class PluginModel : public SentencePieceModel {
 public:
  PluginModel(const Plugin& plugin, void* handle) : plugin_(plugin), handle_(handle) {}
  ~PluginModel() override { plugin_.free(handle_); }
  int vocab_size() const override { return plugin_.vocab_size(handle_); }
  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const override {
    char message[512] = {0};
    ids->resize(text.size() + 16);
    long n = plugin_.encode(handle_, text.data(), text.size(), ids->data(), ids->size(), message,
                            sizeof(message));
    if (n > static_cast<long>(ids->size())) {
      ids->resize(static_cast<size_t>(n));
      n = plugin_.encode(handle_, text.data(), text.size(), ids->data(), ids->size(), message,
                         sizeof(message));
    }
    if (n < 0) {
      *error = message;
      return false;
    }
    ids->resize(static_cast<size_t>(n));
    return true;
  }
  std::string Decode(const std::vector<int>& ids) const override {
    std::string text(ids.size() * 8 + 16, '\0');
    long n = plugin_.decode(handle_, ids.data(), ids.size(), text.data(), text.size());
    if (n > static_cast<long>(text.size())) {
      text.resize(static_cast<size_t>(n));
      n = plugin_.decode(handle_, ids.data(), ids.size(), text.data(), text.size());
    }
    if (n < 0) return "";
    text.resize(static_cast<size_t>(n));
    return text;
  }

 private:
  const Plugin& plugin_;
  void* handle_;
};

}  // namespace

std::unique_ptr<SentencePieceModel> LoadSentencePieceModel(const std::string& path,
                                                           std::string* error) {
  const Plugin& plugin = GetPlugin();
  if (plugin.load == nullptr) {
    *error = plugin.error;
    return nullptr;
  }
  char message[512] = {0};
  void* handle = plugin.load(path.c_str(), message, sizeof(message));
  if (handle == nullptr) {
    *error = message;
    return nullptr;
  }
  return std::make_unique<PluginModel>(plugin, handle);
}

std::string TrainSentencePieceModel(const std::string& options) {
  const Plugin& plugin = GetPlugin();
  if (plugin.train == nullptr) return plugin.error;
  char message[512] = {0};
  return plugin.train(options.c_str(), message, sizeof(message)) == 0 ? "" : message;
}

}  // namespace performer::server
