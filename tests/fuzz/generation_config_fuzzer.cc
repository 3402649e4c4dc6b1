// generation_config.json: LoadGenerationConfig on arbitrary bytes, then the
// load-time check against a vocabulary. An accepted config gives sampling
// defaults a request can run with: finite numbers, ids inside the
// vocabulary once ValidateGenerationConfig passed.
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "server/repository/generation_config.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = performer::fuzz::ScratchPath("generation_config.json");
  static const std::string dir = std::filesystem::path(path).parent_path().string();
  performer::fuzz::WriteFile(path, data, size);
  absl::StatusOr<performer::server::GenerationConfig> config =
      performer::server::LoadGenerationConfig(dir);
  if (!config.ok()) return 0;
  const performer::generation::SamplingParams p = config->SamplingDefaults();
  if (!std::isfinite(p.temperature) || !std::isfinite(p.top_p) ||
      !std::isfinite(p.repetition_penalty) || p.max_new_tokens < 1 || p.top_k < 0) {
    std::abort();
  }
  constexpr int64_t kVocab = 100;
  if (performer::server::ValidateGenerationConfig(*config, kVocab, dir).ok() &&
      p.eos_token_id.has_value() && (*p.eos_token_id < 0 || *p.eos_token_id >= kVocab)) {
    std::abort();
  }
  return 0;
}
