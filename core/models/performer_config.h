// Constructor keywords of performer-pytorch's models, as stored in a model
// folder's config.json (see docs/reference/performer-pytorch.md §1): every
// keyword with the value used, plus "model_class".
//
// Parsing is strict: an unknown keyword, a missing required one or a value of
// the wrong type is an InvalidArgument error that names every offending key,
// so a checkpoint exported with a newer library version does not load with
// silently different semantics. Defaults are the reference's.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/feature_maps/kernel_function.h"

namespace performer::models {

using ::performer::KernelFunction;

// Bounds on config values, checked (ValidateConfig) before anything is
// allocated. Each is far above any real model; with them every size derived
// from a config fits an int64, and with the model folder's check that the
// weights file can hold the parameters a config describes
// (MinimumParameterElements, model_folder.h) a hostile config.json cannot
// make the loader allocate more than the weights file's size.
inline constexpr int64_t kMaxConfigTokens = int64_t{1} << 24;    // num_tokens
inline constexpr int64_t kMaxConfigSeqLen = int64_t{1} << 24;    // max_seq_len, axial sides
inline constexpr int64_t kMaxConfigDim = int64_t{1} << 16;       // dim, dim_head, dim_heads
inline constexpr int64_t kMaxConfigFeatures = int64_t{1} << 20;  // nb_features (resolved)
inline constexpr int64_t kMaxConfigDepth = 1024;                 // depth
inline constexpr int64_t kMaxConfigHeads = 1024;                 // heads
inline constexpr int64_t kMaxConfigFfMult = 1024;                // ff_mult
inline constexpr int64_t kMaxConfigChunks = int64_t{1} << 24;    // ff_chunks, local_window_size

// FastAttention(dim_heads, nb_features=None, ortho_scaling=0, causal=False,
//               generalized_attention=False, kernel_fn=ReLU(), no_projection=False)
struct FastAttentionConfig {
  int64_t dim_heads = 0;
  std::optional<int64_t> nb_features;  // None -> int(dim_heads * ln dim_heads)
  int64_t ortho_scaling = 0;
  bool causal = false;
  bool generalized_attention = false;
  KernelFunction kernel_fn = KernelFunction::kReLU;
  bool no_projection = false;

  int64_t resolved_nb_features() const;
};

// PerformerLM(**kwargs); every keyword of the reference with its default.
struct PerformerLMConfig {
  int64_t num_tokens = 0;                 // required
  int64_t max_seq_len = 0;                // required
  int64_t dim = 0;                        // required
  int64_t depth = 0;                      // required
  int64_t heads = 0;                      // required
  std::optional<int64_t> dim_head = 64;   // None -> dim / heads (only without rotary)
  std::vector<int64_t> local_attn_heads;  // one entry per layer (an int is broadcast)
  int64_t local_window_size = 256;
  bool causal = false;
  int64_t ff_mult = 4;
  std::optional<int64_t> nb_features;  // None -> int(dim_head * ln dim_head)
  int64_t feature_redraw_interval = 1000;
  bool reversible = false;
  int64_t ff_chunks = 1;
  bool ff_glu = false;
  double emb_dropout = 0.0;
  double ff_dropout = 0.0;
  double attn_dropout = 0.0;
  bool generalized_attention = false;
  KernelFunction kernel_fn = KernelFunction::kReLU;
  bool use_scalenorm = false;
  bool use_rezero = false;
  bool cross_attend = false;
  bool no_projection = false;
  bool tie_embed = false;
  bool rotary_position_emb = true;
  bool axial_position_emb = false;
  std::optional<std::vector<int64_t>> axial_position_shape;  // None -> (ceil(max_seq_len/64), 64)
  bool auto_check_redraw = true;
  bool qkv_bias = false;
  bool attn_out_bias = false;
  bool shift_tokens = false;

  int64_t resolved_dim_head() const;
  int64_t resolved_nb_features() const;
  int64_t local_heads(int64_t layer) const;
  std::vector<int64_t> resolved_axial_shape() const;
  // Longest sequence the positional tables cover.
  int64_t position_limit() const;
};

// PerformerEncDec(dim, ignore_index=0, pad_value=0, tie_token_embeds=False,
//                 no_projection=False, enc_*=..., dec_*=...). The decoder is
// always causal with cross attention (the reference forces both).
struct PerformerEncDecConfig {
  int64_t dim = 0;
  int64_t ignore_index = 0;
  int64_t pad_value = 0;
  bool tie_token_embeds = false;
  bool no_projection = false;
  PerformerLMConfig enc;
  PerformerLMConfig dec;
};

// Checks the invariants the reference asserts (dim % heads, local heads per
// layer, ...) and the ones a server needs (positive sizes).
absl::Status ValidateConfig(const PerformerLMConfig& config);
absl::Status ValidateConfig(const FastAttentionConfig& config);

// Parses config.json contents (the "model_class" key, if present, is
// ignored here; the model folder loader dispatches on it).
absl::StatusOr<PerformerLMConfig> ParsePerformerLMConfig(const nlohmann::json& json);
absl::StatusOr<PerformerEncDecConfig> ParsePerformerEncDecConfig(const nlohmann::json& json);
absl::StatusOr<FastAttentionConfig> ParseFastAttentionConfig(const nlohmann::json& json);

// int(d * ln d), the reference's default number of random features.
int64_t DefaultNbFeatures(int64_t dim_head);

// A lower bound on the parameter and buffer elements of the model a
// (validated) config describes: embeddings, positional tables, each layer's
// projections, random-feature matrix and feed-forward. Every one of them is
// stored in the weights file, so a file of fewer bytes cannot hold the model.
uint64_t MinimumParameterElements(const PerformerLMConfig& config);
uint64_t MinimumParameterElements(const PerformerEncDecConfig& config);
uint64_t MinimumParameterElements(const FastAttentionConfig& config);

}  // namespace performer::models
