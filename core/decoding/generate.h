// One-sequence generation loop over a SequenceDecoder (prefill, then sample
// and step until a stop rule fires). The serving engine interleaves many
// sequences itself; this is for tools, tests and benchmarks.
#pragma once

#include <vector>

#include "core/decoding/sequence_decoder.h"
#include "core/generation/sampling_params.h"
#include "core/generation/stop_rules.h"

namespace performer::decoding {

struct GenerationResult {
  std::vector<int64_t> tokens;  // generated tokens (a final eos/stop token included)
  generation::FinishReason finish = generation::FinishReason::kNone;
  std::vector<torch::Tensor> step_logits;  // logits each token was drawn from, when kept
};

// The sequence is created and released here. A token whose position would
// be max_seq_len is still emitted (its logits come from the last valid
// position) but not fed: generation ends with kLength.
absl::StatusOr<GenerationResult> Generate(SequenceDecoder& decoder, const PrefillRequest& request,
                                          const generation::SamplingParams& params,
                                          bool keep_logits = false);

}  // namespace performer::decoding
