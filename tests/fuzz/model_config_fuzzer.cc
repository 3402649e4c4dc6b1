// config.json parsing: the bounded JSON parser, then the PerformerLM,
// PerformerEncDec and FastAttention config parsers on whatever object came
// out. A config the parsers accept is within the documented bounds, and
// the size helpers a loader calls on it do not overflow.
#include <cstdlib>
#include <string_view>

#include "core/io/bounded_file.h"
#include "core/models/performer_config.h"

namespace {

using namespace performer::models;

void CheckLM(const PerformerLMConfig& c) {
  if (c.num_tokens < 1 || c.num_tokens > kMaxConfigTokens || c.max_seq_len < 1 ||
      c.max_seq_len > kMaxConfigSeqLen || c.depth < 1 || c.depth > kMaxConfigDepth || c.dim < 1 ||
      c.dim > kMaxConfigDim || c.heads < 1 || c.heads > kMaxConfigHeads) {
    std::abort();
  }
  if (c.resolved_nb_features() < 1 || c.resolved_nb_features() > kMaxConfigFeatures) std::abort();
  if (c.position_limit() < 1) std::abort();
  for (int64_t layer = 0; layer < c.depth; ++layer) {
    if (c.local_heads(layer) < 0 || c.local_heads(layer) > c.heads) std::abort();
  }
  (void)MinimumParameterElements(c);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<nlohmann::json> json = performer::io::ParseBoundedJson(
      std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
  if (!json.ok()) return 0;
  // What the loader does with every config: its fingerprint dumps it.
  (void)json->dump();
  if (absl::StatusOr<PerformerLMConfig> lm = ParsePerformerLMConfig(*json); lm.ok()) CheckLM(*lm);
  if (absl::StatusOr<PerformerEncDecConfig> ed = ParsePerformerEncDecConfig(*json); ed.ok()) {
    CheckLM(ed->enc);
    CheckLM(ed->dec);
    (void)MinimumParameterElements(*ed);
  }
  if (absl::StatusOr<FastAttentionConfig> fa = ParseFastAttentionConfig(*json); fa.ok()) {
    if (fa->dim_heads < 1 || fa->resolved_nb_features() < 1) std::abort();
    (void)MinimumParameterElements(*fa);
  }
  return 0;
}
