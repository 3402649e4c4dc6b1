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
// where those run. Step() is the exact incremental form of the causal case.
//
// The decode state of the causal heads is the library's recurrent linear
// state (core/recurrent/linear_state.h), one [m, d + 1] tensor per head, in
// a slot pool (core/recurrent/state_pool.h); its tensors, in the order of
// SlotStateSpec (FastAttentionStateTensor), rows first:
//   kv       [.., h, m, d + 1]
//   key_max  [.., h]            softmax kernel only: the running key maximum M
//   v_sum    [.., h, d + 1]     softmax kernel only
// Softmax-kernel heads keep their sums in the frame of M: with
// a_j = u_j - diag_j,
//   kv[..., f, :d] = sum_j exp(a_j - M) v_j,   kv[..., f, d] = sum_j exp(a_j - M)
//   v_sum[..., :d] = sum_j v_j,                v_sum[..., d] = t (tokens so far)
// so that sum_j k'_j v_j = r (kv[:d] + 1e-4 v_sum[:d]) and sum_j k'_j =
// r (kv[d] + 1e-4 t) exactly as the full forward with stabiliser M would
// have them; when M grows to M', kv is multiplied by exp(M - M').
// Generalized-kernel (and no-projection) heads keep plain sums in kv.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "core/feature_maps/performer_kernels.h"
#include "core/models/performer_config.h"
#include "core/recurrent/slot_state.h"

namespace performer::models {

inline constexpr double kCausalDenominatorEps = 1e-6;

// Index of each decode-state tensor in the list SlotStateSpec describes.
enum FastAttentionStateTensor : size_t { kStateKv = 0, kStateKeyMax = 1, kStateValueSum = 2 };

using performer::FeatureKind;

class FastAttentionImpl : public torch::nn::Module {
 public:
  explicit FastAttentionImpl(const FastAttentionConfig& config);

  // The decode-state tensors of `heads` causal heads, per sequence.
  std::vector<SlotTensorSpec> SlotStateSpec(int64_t heads) const;

  // q, k, v [b, h, n, d] -> [b, h, n, d]. Causal attention with a `capture`
  // (the SlotStateSpec tensors of b rows) also fills it with the decode
  // state after the n tokens, in the frame the forward used: the prefill
  // hands the decoder its state.
  torch::Tensor forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        torch::TensorList capture = {});

  // Continues the causal state rows `state` ([b, h, ...]) by n tokens at
  // once: q, k, v [b, h, n, d] -> [b, h, n, d], one chunkwise prefill from
  // the state (inference only). Generalized-kernel (and no-projection)
  // heads give exactly what n Step() calls give. Softmax-kernel heads use
  // one stabiliser for the n tokens, max(state's, the n keys'), where n
  // steps would use each token's running maximum: the 1e-4 of k' then
  // weighs as in a full forward whose stabiliser is that maximum, which
  // lies between the steps' running maximum and the whole sequence's (the
  // reference's full forward).
  torch::Tensor Extend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       torch::TensorList state) const;

  // q' and k' [.., n, m] (PerformerQueryFeatures / PerformerKeyFeatures).
  torch::Tensor QueryFeatures(const torch::Tensor& q) const;
  torch::Tensor KeyFeatures(const torch::Tensor& k) const;
  // One causal step for the rows of `state`: qk [B, 2h, d] (the h query
  // heads, then the h key heads), v [B, h, d]; updates the state in place and
  // returns [B, h, d] (the library's StepLinearState, or for softmax-kernel
  // heads StepSoftmaxKernelState, the feature map fused in).
  torch::Tensor Step(const torch::Tensor& qk, const torch::Tensor& v,
                     torch::TensorList state) const;

  // The step-by-step form of Extend (where RowInvariantOn the state's
  // device), for C sequences of T tokens: qk [C, T, 2h, d] (query heads,
  // then key heads), v [C, T, h, d], the state rows of the C sequences
  // ([C, h, ...]) -> [C, T, h, d]. Each token runs exactly the operations
  // of one Step() (kernels::FavorStateScan, on CUDA
  // kernels::FavorProjectedStateScan; kernels::LinearStateScanNormalized),
  // softmax-kernel heads with each token's running key maximum, so a
  // sequence's outputs and state are the same bits however its tokens are
  // split between scans and steps. Only where ScanSupported(state).
  torch::Tensor Scan(const torch::Tensor& qk, const torch::Tensor& v,
                     torch::TensorList state) const;
  bool ScanSupported(torch::TensorList state) const;

  // Precomputes the projection scaled by the data normaliser for Step. With
  // project_in_step, Step on CUDA gives softmax-kernel heads' query and key
  // to the state kernel unprojected (DecodeStepOptions::
  // favor_projection_in_step).
  void PrepareForDecoding(bool project_in_step = false);

  // Replaces P in place by a fresh Gaussian orthogonal random matrix drawn
  // from the default generator, like the reference's
  // redraw_projection_matrix (ortho_scaling of the config). Drops what
  // PrepareForDecoding cached.
  void RedrawProjectionMatrix();

  // Non-causal constant summary of a context (cross attention): kv [b, h, m, d+1].
  torch::Tensor Summarize(const torch::Tensor& k, const torch::Tensor& v) const;
  // q [B, h, d] against a summary [B, h, m, d+1] -> [B, h, d]. FAVOR+ heads
  // prepared for decoding form each row's query features alone where
  // RowInvariantOn the device: on the CPU with the row-invariant product
  // (SoftmaxInputs), on CUDA in the read-out's launch.
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
  // Causal inference from the state `from` (empty: a new sequence) that
  // writes the state after the tokens to `to` (empty: not kept); they may
  // alias.
  torch::Tensor CausalInference(const torch::Tensor& qf, const torch::Tensor& k,
                                const torch::Tensor& v, torch::TensorList from,
                                torch::TensorList to) const;
  // Whether the rows x project through the skinny product of the prepared
  // d^-1/4 P (LinearRows: a row's bits do not depend on the other rows): in
  // float32 where RowInvariantOn(x's device) (core/attention/
  // row_invariance.h), once PrepareForDecoding has run.
  bool ProjectsRowInvariantly(const torch::Tensor& x) const;
  // u = (d^-1/4 x) P^T [.., m] and diag = |x|^2 / (2 sqrt(d)) [..] of the
  // rows x [.., d], each row by the same operations whatever the others (on
  // the CPU the skinny product and an in-order sum; tensor ops elsewhere).
  std::pair<torch::Tensor, torch::Tensor> SoftmaxInputs(const torch::Tensor& x) const;
  // q' or k' [.., m] of the rows x [.., d] for Step and Scan: the
  // generalized kernel's projection goes through the skinny product where
  // ProjectsRowInvariantly(x), so that a row's features do not depend on how
  // many rows share the call (a BLAS product's order may); otherwise
  // QueryFeatures / KeyFeatures.
  torch::Tensor RowFeatures(const torch::Tensor& x, bool is_query) const;
  FastAttentionConfig config_;
  PerformerFeatureMap feature_map_;
  int64_t nb_features_;
  torch::Tensor projection_matrix_;
  torch::Tensor scaled_projection_;    // d^-1/4 P, PrepareForDecoding
  torch::Tensor scaled_projection_t_;  // (d^-1/4 P)^T, PrepareForDecoding
  bool project_in_step_ = false;       // PrepareForDecoding
};
TORCH_MODULE(FastAttention);

}  // namespace performer::models
