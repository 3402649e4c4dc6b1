// performer-pytorch's FastAttention (docs/reference/performer-pytorch.md §1.4,
// §5.4-5.6): FAVOR+ (or generalized-kernel, or no-projection) linear attention
// over q, k, v [b, h, n, d], with the projection matrix P [m, d] as a buffer
// ("projection_matrix"): loaded from the weights, and redrawn only when
// RedrawProjectionMatrix() is called (training, §7 of the same document).
//
//   non-causal: out_i = q'_i (sum_j k'_j v_j^T) / (q'_i . sum_j k'_j)
//   causal:     out_i = sum_{j<=i} (q'_i . k'_j) v_j / (q'_i . (sum_{j<=i} k'_j + 1e-6))
//
// It is a composition of library parts: the feature map is the library's
// performer kernel (core/feature_maps/performer_kernels.h), the causal case
// advances the library's recurrent linear state (core/recurrent/
// linear_state.h: numerator, normaliser and final state in one chunkwise
// pass, constant memory in n), the non-causal one is the library's
// LinearAttentionProduct and training's causal case its
// CausalLinearNumerator. Their entry points take the fused and CUDA kernels
// where those run. Step() is the exact incremental form of the causal case
// over a DecodeState (see decode_state.h for the running-maximum
// bookkeeping).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "core/feature_maps/performer_kernels.h"
#include "core/models/decode_state.h"
#include "core/models/performer_config.h"

namespace performer::models {

inline constexpr double kCausalDenominatorEps = 1e-6;

using performer::FeatureKind;

class FastAttentionImpl : public torch::nn::Module {
 public:
  explicit FastAttentionImpl(const FastAttentionConfig& config);

  // q, k, v [b, h, n, d] -> [b, h, n, d]. Causal attention with `capture`
  // also fills its rows (kv, key_max, v_sum; [b, h, ...]) with the decode
  // state after the n tokens, in the frame the forward used: the prefill
  // hands the decoder its state.
  torch::Tensor forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        SelfAttentionState* capture = nullptr);

  // Continues the causal state rows `state` ([b, h, ...]) by n tokens at
  // once: q, k, v [b, h, n, d] -> [b, h, n, d], one chunkwise prefill from
  // the state (inference only). Generalized-kernel (and no-projection)
  // heads give exactly what n Step() calls give. Softmax-kernel heads use
  // one stabiliser for the n tokens, max(state's, the n keys'), where n
  // steps would use each token's running maximum: the 1e-4 of k' then
  // weighs as in a full forward whose stabiliser is that maximum, which
  // lies between the steps' running maximum and the whole sequence's (the
  // reference's full forward; decode_state.h).
  torch::Tensor Extend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       SelfAttentionState& state) const;

  // q' and k' [.., n, m] (PerformerQueryFeatures / PerformerKeyFeatures).
  torch::Tensor QueryFeatures(const torch::Tensor& q) const;
  torch::Tensor KeyFeatures(const torch::Tensor& k) const;
  // One causal step for the rows of `state`: qk [B, 2h, d] (the h query
  // heads, then the h key heads), v [B, h, d]; updates the state in place and
  // returns [B, h, d] (the library's StepLinearState, or for softmax-kernel
  // heads StepSoftmaxKernelState, the feature map fused in).
  torch::Tensor Step(const torch::Tensor& qk, const torch::Tensor& v,
                     SelfAttentionState& state) const;

  // Precomputes the projection scaled by the data normaliser for Step.
  void PrepareForDecoding();

  // Replaces P in place by a fresh Gaussian orthogonal random matrix drawn
  // from the default generator, like the reference's
  // redraw_projection_matrix (ortho_scaling of the config). Drops what
  // PrepareForDecoding cached.
  void RedrawProjectionMatrix();

  // Non-causal constant summary of a context (cross attention): kv [b, h, m, d+1].
  torch::Tensor Summarize(const torch::Tensor& k, const torch::Tensor& v) const;
  // q [B, h, d] against a summary [B, h, m, d+1] -> [B, h, d].
  torch::Tensor AttendSummary(const torch::Tensor& q, const torch::Tensor& kv) const;

  FeatureKind feature_kind() const { return feature_map_.kind; }
  int64_t nb_features() const { return nb_features_; }
  // Width of q' and k': nb_features, or dim_heads without projection.
  int64_t feature_dim() const {
    return feature_map_.kind == FeatureKind::kNoProjection ? config_.dim_heads : nb_features_;
  }
  bool causal() const { return config_.causal; }
  const torch::Tensor& projection_matrix() const { return projection_matrix_; }

 private:
  // Causal inference from the state `from` (nullptr: empty) that writes the
  // state after the tokens to `to` (nullptr: not kept); they may alias.
  torch::Tensor CausalInference(const torch::Tensor& qf, const torch::Tensor& k,
                                const torch::Tensor& v, const SelfAttentionState* from,
                                SelfAttentionState* to) const;
  FastAttentionConfig config_;
  PerformerFeatureMap feature_map_;
  int64_t nb_features_;
  torch::Tensor projection_matrix_;
  torch::Tensor scaled_projection_t_;  // (d^-1/4 P)^T, PrepareForDecoding
};
TORCH_MODULE(FastAttention);

}  // namespace performer::models
