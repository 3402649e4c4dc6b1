#include "core/decoding/generate.h"

#include "core/generation/token_sampler.h"

namespace performer::decoding {

absl::StatusOr<GenerationResult> Generate(SequenceDecoder& decoder, const PrefillRequest& request,
                                          const generation::SamplingParams& params,
                                          bool keep_logits) {
  if (absl::Status s = generation::ValidateSamplingParams(params, decoder.info().vocab_size);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<SequenceId> id = decoder.Create();
  if (!id.ok()) return id.status();
  GenerationResult result;
  generation::TokenSampler sampler(params);
  const generation::StopTokenSet stop_tokens(params.stop_token_ids);
  std::vector<int64_t> context = request.prompt;
  absl::StatusOr<torch::Tensor> logits = decoder.Prefill(*id, request);
  while (logits.ok()) {
    if (keep_logits) result.step_logits.push_back(*logits);
    const int64_t token = sampler.Sample(*logits, context);
    context.push_back(token);
    result.tokens.push_back(token);
    // The new token would be fed at position context.size() - 1.
    result.finish = generation::CheckStop(
        params, stop_tokens, token, static_cast<int64_t>(result.tokens.size()),
        static_cast<int64_t>(context.size()) - 1, decoder.info().max_seq_len);
    if (result.finish != generation::FinishReason::kNone) break;
    absl::StatusOr<torch::Tensor> next = decoder.Step({*id}, {token});
    if (!next.ok()) {
      logits = next.status();
      break;
    }
    logits = (*next)[0];
  }
  absl::Status released = decoder.Release(*id);
  if (!logits.ok()) return logits.status();
  if (!released.ok()) return released;
  return result;
}

}  // namespace performer::decoding
