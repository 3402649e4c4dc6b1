// The bench model shared by the decoding benchmarks: a causal PerformerLM of
// vocab 256, dim 512, depth 6, heads 8, dim_head 64, nb_features 256, with
// seeded random weights (speed does not depend on them).
#pragma once

#include <cstdint>
#include <vector>

#include "core/models/decode_step_options.h"
#include "core/models/model_folder.h"
#include "core/models/performer_config.h"

namespace performer::bench {

models::PerformerLMConfig BenchConfig(int64_t max_seq_len = 16384 + 256);

// The model in eval mode, weights N(0, 0.02), projection buffers N(0, 1).
models::LoadedModel BenchModel(const models::PerformerLMConfig& config = BenchConfig());

// n token ids drawn uniformly from [0, vocab) with LibTorch's generator.
std::vector<int64_t> RandomTokens(int64_t n, int64_t vocab);

double Median(std::vector<double> values);

// The decode steps the benchmarks compare (core/models/decode_step_options.h),
// in this order: float32 separate ops (the reference), float32 fused, bf16
// fused, int8 fused (CPU only).
struct DecodeStepVariant {
  const char* name;
  models::DecodeStepOptions step;
};
std::vector<DecodeStepVariant> DecodeStepVariants();

}  // namespace performer::bench
