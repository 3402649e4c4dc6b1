#include "server/tokenizer/sentencepiece_model.h"

#include <dlfcn.h>

#include <mutex>

#ifndef PERFORMER_SENTENCEPIECE_PLUGIN
#define PERFORMER_SENTENCEPIECE_PLUGIN "libperformer_sentencepiece.so"
#endif

namespace performer::server {
namespace {

using LoadFn = SentencePieceModel* (*)(const std::string&, std::string*);
using TrainFn = void (*)(const std::string&, std::string*);

struct Plugin {
  LoadFn load = nullptr;
  TrainFn train = nullptr;
  std::string error;
};

// Loaded once: the build tree's copy first, then the library search path
// (an installed server keeps it next to its other libraries).
const Plugin& GetPlugin() {
  static const Plugin* plugin = [] {
    auto* p = new Plugin();
    const int flags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
    void* handle = dlopen(PERFORMER_SENTENCEPIECE_PLUGIN, flags);
    if (handle == nullptr) handle = dlopen("libperformer_sentencepiece.so", flags);
    if (handle == nullptr) {
      const char* why = dlerror();
      p->error = std::string("cannot load the SentencePiece plugin: ") + (why ? why : "unknown");
      return p;
    }
    p->load = reinterpret_cast<LoadFn>(dlsym(handle, "PerformerSentencePieceLoad"));
    p->train = reinterpret_cast<TrainFn>(dlsym(handle, "PerformerSentencePieceTrain"));
    if (p->load == nullptr || p->train == nullptr) {
      p->error = "the SentencePiece plugin lacks its entry points";
      p->load = nullptr;
      p->train = nullptr;
    }
    return p;
  }();
  return *plugin;
}

}  // namespace

std::unique_ptr<SentencePieceModel> LoadSentencePieceModel(const std::string& path,
                                                           std::string* error) {
  const Plugin& plugin = GetPlugin();
  if (plugin.load == nullptr) {
    *error = plugin.error;
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(plugin.load(path, error));
}

std::string TrainSentencePieceModel(const std::string& options) {
  const Plugin& plugin = GetPlugin();
  if (plugin.train == nullptr) return plugin.error;
  std::string error;
  plugin.train(options, &error);
  return error;
}

}  // namespace performer::server
