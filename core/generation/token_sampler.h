// Next-token selection with the semantics of performer-pytorch's
// AutoregressiveWrapper.generate, for a batch of sequences at once.
//
// Pipeline for one step, per row of logits [B, vocab], as batched tensor ops
// on the logits' device:
//   1. NaN logits are treated as -inf (never emitted).
//   2. Repetition penalty (only if theta > 1): the logit of every distinct
//      token id in the row's context is divided by theta. Plain division,
//      also for negative logits, which makes a negative logit *larger*
//      (closer to 0): the reference's quirk (repetition_penalty_fn), kept for
//      parity. Context ids outside [0, vocab) are ignored.
//   3. top_k (count), then the reference's filter_thres top-k: keep the k
//      largest logits, the rest become -inf. Ties are broken towards the
//      lower id so exactly k tokens survive, deterministically.
//   4. top_p (nucleus): tokens sorted descending (ties -> lower id first);
//      probabilities are softmax(current logits / temperature), i.e. of the
//      already penalized and top-k-filtered logits at the temperature that
//      will actually be sampled (HF's warper order; temperature 0 uses 1
//      here, the argmax is always kept anyway). A token is dropped when the
//      cumulative probability of the tokens before it exceeds top_p (the
//      reference's shifted mask), so the first token is always kept.
//   5. temperature 0: argmax of the processed logits (ties -> lowest id), no
//      random draw. temperature > 0: weights exp((processed - max) /
//      temperature) in double, one uniform draw u from the row's own
//      generator, and the first token whose cumulative weight (in id order)
//      exceeds u * total. Filtered tokens (-inf) have weight exactly 0 and
//      can never be emitted; when every logit is filtered (or one is +inf)
//      the argmax is returned.
// A row's token depends only on its logits, its context and its own
// generator: never on the other rows of the batch.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "core/generation/sampling_params.h"

namespace performer::generation {

// The sampling state of one sequence: its parameters and a private CPU
// generator. The generator is per sampler (not the global torch RNG) so that
// a seeded request is reproducible no matter what else runs in the process.
// Not thread-safe; use one sampler per sequence.
class TokenSampler {
 public:
  // params should have passed ValidateSamplingParams; out-of-range values are
  // clamped rather than rejected here (top_k / filter_thres k to [1, vocab],
  // a non-positive or NaN temperature means greedy, top_p <= 0 keeps only the
  // first token). Seeds the generator from params.seed, or from
  // std::random_device when unset.
  explicit TokenSampler(const SamplingParams& params);

  // One row: SampleBatch over logits reshaped to [1, vocab]. Advances the
  // generator by exactly one draw when temperature > 0, none when greedy.
  // Precondition (TORCH_CHECK): logits has at least one element.
  int64_t Sample(const torch::Tensor& logits, const std::vector<int64_t>& context);

  // Steps 1-4 above for one row: float32 CPU 1-D tensor [vocab], -inf where
  // filtered, before the temperature division. Does not touch the
  // generator. Exposed so tests and tools can inspect what will be sampled
  // from.
  torch::Tensor ProcessLogits(const torch::Tensor& logits,
                              const std::vector<int64_t>& context) const;

  // The seed the generator was created with (params.seed or the drawn one), so
  // a run without an explicit seed can be replayed.
  uint64_t seed() const { return seed_; }

  const SamplingParams& params() const { return params_; }

  // The next uniform double in [0, 1) of this sampler's generator (53
  // random bits); SampleBatch draws one per sampled row.
  double NextUniform();

 private:
  SamplingParams params_;
  uint64_t seed_;
  at::Generator generator_;
};

// Samples row i of logits [B, vocab] (any float dtype, any device) with
// samplers[i] and contexts[i] (a null context pointer means an empty
// context), with batched tensor ops on the logits' device; one copy of the
// B tokens comes back to the host. Preconditions (TORCH_CHECK): logits is
// 2-D with B >= 0 rows and vocab >= 1 columns, samplers.size() ==
// contexts.size() == B, no null sampler.
std::vector<int64_t> SampleBatch(const torch::Tensor& logits,
                                 const std::vector<TokenSampler*>& samplers,
                                 const std::vector<const std::vector<int64_t>*>& contexts);

// Steps 1-4 for a batch: float32 [B, vocab] on the logits' device.
torch::Tensor ProcessLogitsBatch(const torch::Tensor& logits,
                                 const std::vector<const SamplingParams*>& params,
                                 const std::vector<const std::vector<int64_t>*>& contexts);

}  // namespace performer::generation
